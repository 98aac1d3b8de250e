#!/usr/bin/env python3
"""Cross-checks the engine's GPT against an independent PyTorch
implementation: loads the Hugging Face folder gpt_torch_dump wrote, runs the
same batch forward and backward in PyTorch (fp32, CPU), and compares the
logits, the loss and every parameter gradient with the engine's, each within
an fp32 tolerance relative to the tensor's scale.

  gpt_torch_check.py DUMP_DIR

Where Hugging Face transformers is installed too, the folder is also loaded
with transformers.GPT2LMHeadModel.from_pretrained and its logits compared.

Exit 0 when everything matches, 1 on a mismatch, 77 (skip) when PyTorch is
not installed (Debian: apt-get install python3-torch).
"""
import json
import math
import struct
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("skipped: PyTorch is not installed")
    sys.exit(77)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = bytearray(data[8 + n:])
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        assert entry["dtype"] == "F32", name
        begin, end = entry["data_offsets"]
        t = torch.frombuffer(body[begin:end], dtype=torch.float32)
        out[name] = t.reshape(entry["shape"]).clone()
    return out


def forward(w, cfg, tokens, targets):
    """GPT-2 exactly as transformers' GPT2LMHeadModel computes it."""
    n_head, c = cfg["n_head"], cfg["n_embd"]
    b, t = tokens.shape
    x = w["transformer.wte.weight"][tokens] + w["transformer.wpe.weight"][:t]
    mask = torch.ones(t, t, dtype=torch.bool).tril()
    for l in range(cfg["n_layer"]):
        p = lambda name: w[f"transformer.h.{l}.{name}"]
        h = F.layer_norm(x, (c,), p("ln_1.weight"), p("ln_1.bias"), 1e-5)
        qkv = h @ p("attn.c_attn.weight") + p("attn.c_attn.bias")  # Conv1D
        q, k, v = qkv.split(c, dim=2)
        shape = (b, t, n_head, c // n_head)
        q, k, v = (z.reshape(shape).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // n_head)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        x = x + y @ p("attn.c_proj.weight") + p("attn.c_proj.bias")
        h = F.layer_norm(x, (c,), p("ln_2.weight"), p("ln_2.bias"), 1e-5)
        h = F.gelu(h @ p("mlp.c_fc.weight") + p("mlp.c_fc.bias"),
                   approximate="tanh")
        x = x + h @ p("mlp.c_proj.weight") + p("mlp.c_proj.bias")
    x = F.layer_norm(x, (c,), w["transformer.ln_f.weight"],
                     w["transformer.ln_f.bias"], 1e-5)
    logits = (x @ w["transformer.wte.weight"].t()).reshape(b * t, -1)
    return logits, F.cross_entropy(logits, targets.reshape(-1))


def ours(hf_name):
    """The engine's name for a Hugging Face tensor name."""
    name = hf_name[len("transformer."):]
    return name[:3] if name in ("wte.weight", "wpe.weight") else name


def close(what, got, want, tol):
    scale = want.abs().max().item()
    diff = (got - want).abs().max().item()
    ok = diff <= tol * (1.0 + scale)
    print(f"{'ok ' if ok else 'BAD'} {what:32s} max|diff| {diff:.2e} "
          f"(scale {scale:.2e})")
    return ok


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    out = sys.argv[1]
    with open(f"{out}/hf/config.json") as f:
        cfg = json.load(f)
    weights = read_safetensors(f"{out}/hf/model.safetensors")
    expected = read_safetensors(f"{out}/expected.safetensors")
    for t in weights.values():
        t.requires_grad_(True)
    tokens = expected["tokens"].long()
    targets = expected["targets"].long()
    logits, loss = forward(weights, cfg, tokens, targets)
    loss.backward()
    ok = close("logits", logits.detach(), expected["logits"], 1e-5)
    ok &= close("loss", loss.detach().reshape(1), expected["loss"], 1e-6)
    for name, w in sorted(weights.items()):
        grad = w.grad
        if grad.dim() == 2 and ".h." in name and "wte" not in name:
            grad = grad.t()  # Conv1D [in, out] -> the engine's [out, in]
        ok &= close("grad " + ours(name), grad, expected["grad." + ours(name)],
                    1e-5)
    ok &= check_transformers(out, expected, tokens)
    print("PyTorch", torch.__version__, "agrees" if ok else "DISAGREES")
    return 0 if ok else 1


def check_transformers(out, expected, tokens):
    """The export loads in transformers' GPT2LMHeadModel with the same
    logits (only where transformers is installed)."""
    try:
        import transformers
    except ImportError:
        print("-- transformers not installed; export not loaded")
        return True
    model = transformers.GPT2LMHeadModel.from_pretrained(f"{out}/hf")
    model.eval()
    with torch.no_grad():
        logits = model(tokens).logits.reshape(-1, model.config.vocab_size)
    ok = close(f"transformers {transformers.__version__} logits", logits,
               expected["logits"], 1e-5)
    return ok & check_special_tokens(model)


def check_special_tokens(model):
    """The export names no begin or end token (ours have none): with
    GPT2Config's default 50256, outside a small vocabulary, transformers
    warns on every load and generate() never stops at an end."""
    vocab = model.config.vocab_size
    ok = True
    for name in ("bos_token_id", "eos_token_id"):
        for where, config in (("config", model.config),
                              ("generation_config", model.generation_config)):
            value = getattr(config, name)
            good = value is None or 0 <= value < vocab
            print(f"{'ok ' if good else 'BAD'} {where}.{name} {value} "
                  f"(vocabulary 0-{vocab - 1})")
            ok &= good
    return ok


if __name__ == "__main__":
    sys.exit(main())
