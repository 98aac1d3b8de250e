#!/usr/bin/env python3
"""PyTorch CPU peer of gpt_cpu_bench: the same GPT-2 architecture (learned
token and position embeddings, pre-LayerNorm blocks, causal multi-head
attention, tanh GELU, tied output embedding), the same sizes, random tokens,
forward + backward + AdamW (with global-norm clipping), timed after warm-up
steps on the same number of threads. Prints one JSON line with the same
fields as gpt_cpu_bench.

  python3 gpt_torch_bench.py [--threads 2] [--steps 20] [--warmup 3]
      [--n_layer 4] [--n_head 4] [--d_model 128] [--seq_len 64]
      [--vocab_size 65] [--batch 16]
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(d)
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.c_fc = nn.Linear(d, 4 * d)
        self.mlp_proj = nn.Linear(4 * d, d)

    def attention(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        shape = (b, t, self.heads, c // self.heads)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.heads)
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.c_proj(y)

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)),
                                        approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.wte = nn.Embedding(a.vocab_size, a.d_model)
        self.wpe = nn.Embedding(a.seq_len, a.d_model)
        self.h = nn.ModuleList(Block(a.d_model, a.n_head)
                               for _ in range(a.n_layer))
        self.ln_f = nn.LayerNorm(a.d_model)
        # GPT-2's initialization, as the engine's.
        for name, p in self.named_parameters():
            if p.dim() == 1:
                if "ln" not in name:
                    nn.init.zeros_(p)
            else:
                std = 0.02
                if name.endswith("c_proj.weight") or \
                        name.endswith("mlp_proj.weight"):
                    std /= math.sqrt(2 * a.n_layer)
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1])
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]),
                               targets.view(-1))


def main():
    p = argparse.ArgumentParser()
    for name, default in [("threads", 2), ("steps", 20), ("warmup", 3),
                          ("n_layer", 4), ("n_head", 4), ("d_model", 128),
                          ("seq_len", 64), ("vocab_size", 65), ("batch", 16)]:
        p.add_argument("--" + name, type=int, default=default)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    model = Gpt(a)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1,
                            foreach=True)
    idx = torch.randint(a.vocab_size, (a.batch, a.seq_len))
    targets = torch.randint(a.vocab_size, (a.batch, a.seq_len))
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(idx, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    seconds = time.perf_counter() - start
    print(json.dumps({
        "impl": "pytorch-cpu " + torch.__version__, "threads": a.threads,
        "n_layer": a.n_layer, "n_head": a.n_head, "d_model": a.d_model,
        "seq_len": a.seq_len, "vocab_size": a.vocab_size, "batch": a.batch,
        "steps": a.steps,
        "parameters": sum(p.numel() for p in model.parameters()),
        "seconds": round(seconds, 3),
        "tokens_per_second": round(a.steps * a.batch * a.seq_len / seconds,
                                   1),
        "last_loss": round(loss.item(), 4)}))


if __name__ == "__main__":
    main()
