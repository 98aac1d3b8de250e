#!/usr/bin/env python3
"""PyTorch GPU peer of gpt_train_bench: the same GPT-2 (gpt_torch_bench.Gpt:
learned positions, pre-LayerNorm, tanh GELU, tied output embedding), here
with F.scaled_dot_product_attention, fused AdamW, bf16 autocast (or fp32),
random tokens, timed per step after warm-up, in eager mode and under
torch.compile. Same metrics and CSV columns as gpt_train_bench.

  python3 gpt_torch_gpu_bench.py [--config 124m|shakespeare|tiny]
      [--precision bf16|fp32] [--modes eager,compile] [--micro-batch N|max]
      [--steps 20] [--warmup 3] [--device cuda|cpu] [--csv FILE]

--micro-batch max: the largest micro-batch whose real step fits (doubling,
then bisection, in eager mode); torch.compile runs at that size, backing
off by 10% if it runs out of memory. 'tiny' and --device cpu check the
script itself on a machine without a GPU (torch 1.x: no compile, and the
attention falls back to the explicit softmax). Needs no network.
"""
import argparse
import csv
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_torch_bench  # noqa: E402  (the model, shared with the CPU peer)

PEAK_FLOPS = 989e12  # H100/H200 SXM dense bf16
CSV_HEADER = ["impl", "config", "precision", "device", "micro_batch",
              "seq_len", "params", "steps", "step_ms_median", "tokens_per_s",
              "mfu_pct", "peak_alloc_mib", "device_used_mib", "last_loss"]
CONFIGS = {  # n_layer, n_head, d_model, seq_len, vocab_size, default batch
    "124m": (12, 12, 768, 1024, 50304, 8),
    "shakespeare": (4, 4, 128, 64, 65, 16),
    "tiny": (2, 2, 32, 16, 65, 4),
}


def sdpa_attention(self, x):
    """Block.attention with PyTorch's fused causal attention kernel."""
    b, t, c = x.shape
    q, k, v = self.c_attn(x).split(c, dim=2)
    shape = (b, t, self.heads, c // self.heads)
    q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Gpt(gpt_torch_bench.Gpt):
    """The CPU peer's model, with positions made on the tokens' device."""

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]),
                               targets.view(-1))


def build(a, cfg):
    if hasattr(F, "scaled_dot_product_attention"):
        gpt_torch_bench.Block.attention = sdpa_attention
    n_layer, n_head, d_model, seq_len, vocab, _ = cfg
    shape = argparse.Namespace(n_layer=n_layer, n_head=n_head,
                               d_model=d_model, seq_len=seq_len,
                               vocab_size=vocab)
    torch.manual_seed(1)
    model = Gpt(shape).to(a.device)
    fused = {"fused": True} if a.device == "cuda" else {}
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95),
                            weight_decay=0.1, **fused)
    return model, opt


def make_step(a, model, opt):
    def step(idx, targets):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=a.device, dtype=torch.bfloat16,
                            enabled=a.precision == "bf16"):
            loss = model(idx, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss
    return step


def build_step(a, cfg, mode):
    """Model, optimizer and step function; compile mode compiles the model
    (forward and backward graphs), as nanoGPT does."""
    model, opt = build(a, cfg)
    compiled = torch.compile(model) if mode == "compile" else model
    return model, opt, make_step(a, compiled, opt)


def sync(a):
    if a.device == "cuda":
        torch.cuda.synchronize()


def run_steps(a, cfg, step, batch, count, times=None):
    seq, vocab = cfg[3], cfg[4]
    idx = torch.randint(vocab, (batch, seq), device=a.device)
    targets = torch.randint(vocab, (batch, seq), device=a.device)
    loss = None
    for _ in range(count):
        start = time.perf_counter()
        loss = step(idx, targets)
        sync(a)
        if times is not None:
            times.append(time.perf_counter() - start)
    return loss


def is_oom(e):
    return isinstance(e, torch.cuda.OutOfMemoryError) or \
        "out of memory" in str(e)


def free_memory(a):
    if a.device == "cuda":
        torch.cuda.empty_cache()


def fits(a, cfg, batch, mode):
    """Whether one training step at this micro-batch runs."""
    model, opt, step = build_step(a, cfg, mode)
    try:
        run_steps(a, cfg, step, batch, 1)
        return True
    except Exception as e:  # noqa: BLE001  (OOM types differ by version)
        if not is_oom(e):
            raise
        return False
    finally:
        del model, opt, step
        free_memory(a)


def largest_batch(a, cfg, mode):
    limit = (1 << 24) // cfg[3]  # the engine's micro-batch token limit
    lo, hi = 0, 1
    while hi <= limit and fits(a, cfg, hi, mode):
        lo, hi = hi, hi * 2
    hi = min(hi, limit + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(a, cfg, mid, mode) else (lo, mid)
    print(f"micro-batch search ({mode}): largest that runs a step: {lo}",
          flush=True)
    return lo


def measure(a, cfg, mode, batch):
    """Times `a.steps` steps after `a.warmup`; returns the CSV row."""
    if a.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    model, opt, step = build_step(a, cfg, mode)
    run_steps(a, cfg, step, batch, max(a.warmup, 1 if mode == "compile"
                                       else 0))
    times = []
    loss = run_steps(a, cfg, step, batch, a.steps, times)
    median = statistics.median(times)
    n_layer, _, d_model, seq, _, _ = cfg
    params = sum(p.numel() for p in model.parameters())
    tokens_per_s = batch * seq / median
    mfu = tokens_per_s * (6 * params + 6 * n_layer * d_model * seq) / \
        PEAK_FLOPS
    peak = used = 0.0
    name = "cpu"
    if a.device == "cuda":
        peak = torch.cuda.max_memory_allocated() / 2**20
        free, total = torch.cuda.mem_get_info()
        used = (total - free) / 2**20
        name = torch.cuda.get_device_name()
    print(f"device {name} | torch {torch.__version__} {mode} {a.config} "
          f"{a.precision} micro-batch {batch} x {seq} tokens, {params} "
          f"parameters\nstep {median * 1e3:.2f} ms (median of {len(times)}; "
          f"min {min(times) * 1e3:.2f}, max {max(times) * 1e3:.2f}) | "
          f"{tokens_per_s:.0f} tokens/s | MFU {mfu * 100:.2f}% of "
          f"{PEAK_FLOPS / 1e12:.0f} TFLOP/s | peak allocated {peak:.0f} MiB,"
          f" device {used:.0f} MiB", flush=True)
    row = [f"torch-{mode}", a.config, a.precision, name, batch, seq, params,
           a.steps, f"{median * 1e3:.3f}", f"{tokens_per_s:.1f}",
           f"{mfu * 100:.2f}", f"{peak:.1f}", f"{used:.1f}",
           f"{loss.item():.4f}"]
    del model, opt, step
    free_memory(a)
    return row


def run_mode(a, cfg, mode, batch):
    """measure(), backing off 10% at a time when compile needs more."""
    for _ in range(12):
        try:
            return measure(a, cfg, mode, batch)
        except Exception as e:  # noqa: BLE001
            if not (a.max_batch and is_oom(e)) or batch <= 1:
                raise
            free_memory(a)
            batch = min(batch - 1, batch * 9 // 10)
            print(f"{mode}: out of memory; trying micro-batch {batch}",
                  flush=True)
    raise RuntimeError("no micro-batch fits")


def write_rows(a, rows):
    print("CSV " + ",".join(CSV_HEADER))
    for row in rows:
        print("CSV " + ",".join(str(x) for x in row))
    if a.csv:
        fresh = not os.path.exists(a.csv)
        with open(a.csv, "a", newline="") as f:
            w = csv.writer(f)
            if fresh:
                w.writerow(CSV_HEADER)
            w.writerows(rows)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", choices=sorted(CONFIGS), default="124m")
    p.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    p.add_argument("--modes", default="eager,compile")
    p.add_argument("--micro-batch", default="")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--csv", default="")
    a = p.parse_args()
    a.modes = [m for m in a.modes.split(",") if m]
    if any(m not in ("eager", "compile") for m in a.modes):
        p.error("--modes: eager and/or compile")
    if "compile" in a.modes and not hasattr(torch, "compile"):
        print(f"torch {torch.__version__} has no torch.compile; skipping it",
              file=sys.stderr)
        a.modes.remove("compile")
    a.max_batch = a.micro_batch == "max"
    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("no CUDA device visible to torch (use --device cpu)")
    if a.steps < 1:
        p.error("--steps must be at least 1")
    return a


def main():
    a = parse_args()
    cfg = CONFIGS[a.config]
    if a.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = a.precision == "bf16"
        torch.backends.cudnn.allow_tf32 = a.precision == "bf16"
    if a.max_batch:
        batch = largest_batch(a, cfg, "eager")
        if batch == 0:
            sys.exit("not even micro-batch 1 fits")
    else:
        batch = int(a.micro_batch) if a.micro_batch else cfg[5]
    write_rows(a, [run_mode(a, cfg, mode, batch) for mode in a.modes])


if __name__ == "__main__":
    main()
