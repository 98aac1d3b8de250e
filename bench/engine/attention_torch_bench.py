#!/usr/bin/env python3
"""The PyTorch peer of attention_bench: causal scaled_dot_product_attention
(PyTorch picks its flash kernel for bf16 on Hopper) forward and backward at
one shape, bf16, timed with CUDA events, median of --reps after --warmup.
FLOPs are counted as attention_bench counts them (the causal half of each
T x T product; the backward as 2.5x the forward).

  python3 attention_torch_bench.py [--batch 16] [--seq 1024] [--heads 12]
      [--head-size 64] [--reps 20] [--warmup 3] [--csv FILE]
"""
import argparse
import os
import statistics

import torch
import torch.nn.functional as F


def main():
    p = argparse.ArgumentParser()
    for name, default in (("batch", 16), ("seq", 1024), ("heads", 12),
                          ("head-size", 64), ("reps", 20), ("warmup", 3)):
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--csv")
    a = p.parse_args()
    shape = (a.batch, a.heads, a.seq, a.head_size)
    g = torch.Generator(device="cuda").manual_seed(1)
    q, k, v = (torch.rand(shape, device="cuda", generator=g,
                          dtype=torch.bfloat16).mul_(2).sub_(1)
               .requires_grad_() for _ in range(3))
    dout = torch.rand(shape, device="cuda", generator=g,
                      dtype=torch.bfloat16).mul_(2).sub_(1)
    start, stop = (torch.cuda.Event(enable_timing=True) for _ in range(2))
    fwd, bwd = [], []
    for rep in range(a.warmup + a.reps):
        start.record()
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        stop.record()
        stop.synchronize()
        f = start.elapsed_time(stop)
        start.record()
        out.backward(dout)
        stop.record()
        stop.synchronize()
        b = start.elapsed_time(stop)
        q.grad = k.grad = v.grad = None
        if rep >= a.warmup:
            fwd.append(f)
            bwd.append(b)
    product = 2.0 * a.batch * a.heads * a.seq * (a.seq + 1) / 2 * a.head_size
    f_ms, b_ms = statistics.median(fwd), statistics.median(bwd)
    f_tf, b_tf = 2 * product / f_ms / 1e9, 5 * product / b_ms / 1e9
    print(f"torch sdpa bf16 B={a.batch} T={a.seq} H={a.heads} "
          f"hs={a.head_size} ({a.reps} reps): forward {f_ms:.3f} ms "
          f"({f_tf:.1f} TFLOP/s), backward {b_ms:.3f} ms ({b_tf:.1f} TFLOP/s "
          f"as 2.5x the forward)")
    if a.csv:
        new = not os.path.exists(a.csv) or os.path.getsize(a.csv) == 0
        with open(a.csv, "a") as f:
            if new:
                f.write("impl,batch,seq,heads,head_size,reps,forward_ms,"
                        "forward_tflops,backward_ms,backward_tflops\n")
            f.write(f"torch-sdpa,{a.batch},{a.seq},{a.heads},{a.head_size},"
                    f"{a.reps},{f_ms},{f_tf},{b_ms},{b_tf}\n")


if __name__ == "__main__":
    main()
