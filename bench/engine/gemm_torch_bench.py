#!/usr/bin/env python3
"""The PyTorch peer of gemm_bench: the same linear-layer products of a GPT
training step in bf16, as PyTorch's eager autograd runs them (cuBLAS through
torch.nn.functional.linear and torch.matmul; the forward with its bias, the
GELU forward and gelu' backward as their own kernels after the product,
which is what eager runs; weight gradients in bf16, as autocast computes
them), each timed alone with CUDA events, median of --reps after --warmup,
and the step's total with each product counted as often as a step runs it.
FLOPs are 2 * tokens * in * out a product, as gemm_bench counts them.

  python3 gemm_torch_bench.py [--tokens 180224] [--d-model 768]
      [--vocab 50304] [--layers 12] [--reps 10] [--warmup 2] [--csv FILE]
"""
import argparse
import os
import statistics

import torch
import torch.nn.functional as F


def products(a):
    """(name, in, out, pass, bias, gelu, per step): gemm_bench's list."""
    c, l = a.d_model, a.layers
    return [
        ("qkv forward", c, 3 * c, "forward", True, False, l),
        ("attn proj forward", c, c, "forward", True, False, l),
        ("fc forward + GELU", c, 4 * c, "forward", True, True, l),
        ("fc proj forward", 4 * c, c, "forward", True, False, l),
        ("classifier forward", c, a.vocab, "forward", False, False, 1),
        ("classifier input grad", c, a.vocab, "input", False, False, 1),
        ("classifier weight grad", c, a.vocab, "weight", False, False, 1),
        ("fc proj input grad + gelu'", 4 * c, c, "input", False, True, l),
        ("fc proj weight grad", 4 * c, c, "weight", False, False, l),
        ("fc input grad", c, 4 * c, "input", False, False, l),
        ("fc weight grad", c, 4 * c, "weight", False, False, l),
        ("attn proj input grad", c, c, "input", False, False, l),
        ("attn proj weight grad", c, c, "weight", False, False, l),
        ("qkv input grad", c, 3 * c, "input", False, False, l),
        ("qkv weight grad", c, 3 * c, "weight", False, False, l),
    ]


def rand(g, *shape):
    return torch.rand(shape, device="cuda", generator=g,
                      dtype=torch.bfloat16).mul_(2).sub_(1)


def main():
    p = argparse.ArgumentParser()
    for name, default in (("tokens", 176 * 1024), ("d-model", 768),
                          ("vocab", 50304), ("layers", 12), ("reps", 10),
                          ("warmup", 2)):
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--csv")
    a = p.parse_args()
    g = torch.Generator(device="cuda").manual_seed(1)
    start, stop = (torch.cuda.Event(enable_timing=True) for _ in range(2))
    print(f"torch GEMMs of a GPT step, bf16: {a.tokens} tokens, d_model "
          f"{a.d_model}, vocab {a.vocab}, {a.layers} layers; median of "
          f"{a.reps} reps")
    step_ms = step_flops = 0.0
    rows = []
    for name, n_in, n_out, kind, bias, gelu, per_step in products(a):
        # One product's operands at a time (the logits are 18 GB at the
        # defaults), freed before the next.
        x, y = rand(g, a.tokens, n_in), rand(g, a.tokens, n_out)
        w = rand(g, n_out, n_in)
        b = rand(g, n_out) if bias else None
        pre = rand(g, a.tokens, n_in) if kind == "input" and gelu else None
        if kind == "forward":
            def run():
                out = F.linear(x, w, b)
                return F.gelu(out, approximate="tanh") if gelu else out
        elif kind == "input":
            def run():
                dx = torch.matmul(y, w)
                if pre is None:
                    return dx
                return torch.ops.aten.gelu_backward(dx, pre,
                                                    approximate="tanh")
        else:
            def run():
                return torch.matmul(y.t(), x)
        times = []
        for rep in range(a.warmup + a.reps):
            start.record()
            run()
            stop.record()
            stop.synchronize()
            if rep >= a.warmup:
                times.append(start.elapsed_time(stop))
        del x, y, w, b, pre
        torch.cuda.empty_cache()
        ms = statistics.median(times)
        flops = 2.0 * a.tokens * n_in * n_out
        tflops = flops / ms / 1e9
        print(f"{name:<28} x{per_step:<3} torch {ms:8.3f} ms "
              f"{tflops:6.1f} TFLOP/s")
        step_ms += ms * per_step
        step_flops += flops * per_step
        rows.append(f'torch,"{name}",{per_step},{a.tokens},{n_in},{n_out},'
                    f'0,{ms},{tflops}')
    print(f"step total: torch {step_ms:.2f} ms "
          f"({step_flops / step_ms / 1e9:.1f} TFLOP/s)")
    if a.csv:
        new = not os.path.exists(a.csv) or os.path.getsize(a.csv) == 0
        with open(a.csv, "a") as f:
            if new:
                f.write("impl,product,per_step,tokens,in,out,candidate,ms,"
                        "tflops\n")
            for row in rows:
                f.write(row + "\n")


if __name__ == "__main__":
    main()
