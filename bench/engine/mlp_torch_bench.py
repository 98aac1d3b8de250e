#!/usr/bin/env python3
"""PyTorch CPU peer of `yard-train run` on an MNIST MLP: the same data (the
first images of an IDX file for training, the last `holdout` held out),
normalization ((x/255 - 0.1307)/0.3081), model (784 -> hidden -> ReLU ->
10), AdamW (betas 0.9/0.999, eps 1e-8, no weight decay), global-norm
clipping at 1.0, cosine decay to 0.1x lr, shuffled micro-batches, on the
same number of threads. Times the training steps (data shuffling and the
final evaluation excluded) and prints one JSON line.

  python3 mlp_torch_bench.py --images IDX.gz --labels IDX.gz [--holdout 2000]
      [--hidden 128] [--micro_batch 32] [--steps 1500] [--lr 0.003]
      [--threads 1] [--flush_denormal]

--flush_denormal sets torch.set_flush_denormal(True) (FTZ/DAZ), which
PyTorch leaves off by default.
"""
import argparse
import gzip
import json
import math
import struct
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def read_idx(path):
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        data = f.read()
    magic, count = struct.unpack(">II", data[:8])
    dims = magic & 0xFF
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    body = data[4 + 4 * dims:]
    return torch.frombuffer(bytearray(body), dtype=torch.uint8).reshape(shape)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--images", required=True)
    p.add_argument("--labels", required=True)
    p.add_argument("--holdout", type=int, default=2000)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--micro_batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--lr", type=float, default=0.003)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--flush_denormal", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    if a.flush_denormal and not torch.set_flush_denormal(True):
        raise SystemExit("this CPU cannot flush denormals")

    images = read_idx(a.images).reshape(-1, 784).float()
    images = (images / 255.0 - 0.1307) / 0.3081
    labels = read_idx(a.labels).long()
    train_x, train_y = images[:-a.holdout], labels[:-a.holdout]
    eval_x, eval_y = images[-a.holdout:], labels[-a.holdout:]

    model = nn.Sequential(nn.Linear(784, a.hidden), nn.ReLU(),
                          nn.Linear(a.hidden, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.999),
                            eps=1e-8, weight_decay=0.0)
    n = train_x.shape[0]
    order = torch.randperm(n)
    batches = []
    for step in range(a.steps):
        start = (step * a.micro_batch) % n
        idx = order[start:start + a.micro_batch]
        if idx.numel() < a.micro_batch:
            idx = torch.cat([idx, order[:a.micro_batch - idx.numel()]])
        batches.append((train_x[idx], train_y[idx]))

    begin = time.perf_counter()
    for step, (x, y) in enumerate(batches):
        progress = step / max(1, a.steps - 1)
        lr = a.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))
        for g in opt.param_groups:
            g["lr"] = lr
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    seconds = time.perf_counter() - begin

    with torch.no_grad():
        logits = model(eval_x)
        eval_loss = F.cross_entropy(logits, eval_y).item()
        accuracy = (logits.argmax(1) == eval_y).float().mean().item()
    print(json.dumps({
        "impl": "pytorch" + (" flush_denormal" if a.flush_denormal else ""),
        "torch": torch.__version__, "threads": a.threads, "lr": a.lr,
        "steps": a.steps, "seconds": round(seconds, 3),
        "ms_per_step": round(1000 * seconds / a.steps, 4),
        "train_loss_last": round(loss.item(), 4),
        "eval_loss": round(eval_loss, 4), "eval_accuracy": round(accuracy, 4),
    }))


if __name__ == "__main__":
    main()
