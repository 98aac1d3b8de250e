#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into fuzz/corpus/<target>/.

The seeds are small, hand-made inputs, a few valid and a few broken, so the
fuzzers start from the interesting shapes instead of from nothing. They are
checked in; run this only to regenerate them after a format change. Inputs
that once crashed a target are checked in beside them as crash-*, by hand,
and this script leaves those alone.

    python3 fuzz/make_seed_corpus.py
"""

import gzip
import json
import os
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# --- specs -----------------------------------------------------------------

MLP_YAML = """name: mnist-mlp
model: {mlp: {hidden: [32, 16]}}
data:
  mnist:
    images: mnist/images.gz
    labels: mnist/labels.gz
    holdout: 100
optimizer: {lr: 1e-3, weight_decay: 0.01, warmup_steps: 5, beta2: 0.99}
batch: {micro_batch: 16, grad_accum: 2}
steps: 100
seed: 7
precision: FP32
resources: {gpus: 0, cpu_threads: 2}
eval: {every_steps: 50, max_batches: 4}
checkpoint: {every_steps: 50, keep_last: 2}
log_every_steps: 10
priority: -3
"""

GPT_JSON = {
    "name": "gpt-tokens \u00e9",
    "model": {"gpt": {"n_layer": 2, "n_head": 2, "d_model": 16,
                      "seq_len": 8, "vocab_size": 300,
                      "init_from": "hf/small"}},
    "data": {"tokens": {"train": ["shards/a.bin", "shards/b.bin"],
                        "eval": ["shards/val.bin"]}},
    "optimizer": {"lr": 0.0003, "grad_clip": 0, "min_lr_ratio": 0.5},
    "batch": {"micro_batch": 4},
    "steps": "20",
    "seed": "18446744073709551615",
}

TEXT_YAML = """# anchors and aliases
eval: &every {every_steps: 1}
checkpoint: *every
name: "text \\u2713"
model: {gpt: {n_layer: 1, n_head: 1, d_model: 8, seq_len: 4,
              vocab_size: 65}}
data: {text: {train: 'text/input.txt', eval: text/val.txt, tokenizer: CHAR}}
batch: {micro_batch: 2}
steps: 1
"""


def specs():
    write("spec", "mlp.yaml", MLP_YAML)
    write("spec", "gpt-tokens.json", json.dumps(GPT_JSON, indent=1))
    write("spec", "text-char.yaml", TEXT_YAML)
    write("spec", "early-stopping.yaml", MLP_YAML.replace(
        "eval: {every_steps: 50, max_batches: 4}",
        "eval: {every_steps: 25, max_batches: 4, patience: 2, "
        "min_delta: 0.001}").replace(
        "checkpoint: {every_steps: 50, keep_last: 2}",
        "checkpoint: {every_steps: 50, keep_last: 2, keep_best: true}"))
    write("spec", "bad-unknown-field.yaml", "name: x\nstepz: 3\n")
    write("spec", "bad-json-trailing-comma.json", '{"name": "x", "steps": 1,}')
    write("spec", "bad-oneof.yaml",
          "model: {mlp: {hidden: [1]}, gpt: {n_layer: 1}}\n")
    write("spec", "bad-types.yaml",
          "steps: abc\nbatch: [1]\npriority: 1e99\nseed: -1\n")
    write("spec", "bad-deep.yaml", "a: " + "[" * 40 + "]" * 40 + "\n")
    write("spec", "bad-depends.yaml",
          "depends_on: [j-1, j-1, '', \"j 2\", {a: 1}]\n")
    write("spec", "bad-aliases.yaml",
          "a: &a [x, x, x, x]\nb: &b [*a, *a, *a, *a]\nc: &c [*b, *b, *b]\n"
          "name: *c\n")
    # Few nodes, much text: 2,000 aliases of an 8 KB string.
    write("spec", "bad-alias-expansion.yaml",
          "name: &s " + "x" * 8000 + "\ndata: [" +
          ", ".join(["*s"] * 2000) + "]\n")
    write("spec", "bad-limits.json", json.dumps({
        "name": "n" * 200,
        "model": {"mlp": {"hidden": [2147483647, 65536], "input_dim": 784}},
        "data": {"mnist": {"images": "../etc/passwd", "labels": "/abs"}},
        "batch": {"micro_batch": 0}, "steps": "9223372036854775807"}))
    # `yard submit --set` overrides (each input is also tried as one).
    for name, text in [("lr", "optimizer.lr=0.003"),
                       ("list", "model.mlp.hidden=512,256"),
                       ("oneof", "model.gpt.n_layer=2"),
                       ("enum", "precision=BF16"),
                       ("depends", "depends_on=j-000001,j-000002"),
                       ("patience", "eval.patience=3"),
                       ("bad-range", "batch.micro_batch=2147483648"),
                       ("bad-message", "model=mlp")]:
        write("spec", "override-" + name + ".txt", text)


# --- safetensors, checkpoints and Hugging Face folders -----------------------

def safetensors(tensors, metadata=None):
    """tensors: list of (name, shape, float values)."""
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    data = b""
    for name, shape, values in tensors:
        raw = struct.pack("<%df" % len(values), *values)
        header[name] = {"dtype": "F32", "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def checkpoint_meta(tensors, blob, step=1, **extra):
    meta = {
        "magic": "trainyard-checkpoint", "version": 1, "step": step,
        "rng": {"algorithm": "xoshiro256**", "state": "1 2 3 4"},
        "data_cursor": {"epoch": 0, "position": 3},
        "spec_fingerprint": "00112233aabbccdd",
        "tensors_file": {"name": "model.safetensors", "bytes": len(blob),
                         "crc32": "%08x" % zlib.crc32(blob)},
    }
    meta.update(extra)
    meta["tensors"] = [{"name": n, "dtype": "F32", "shape": s}
                       for n, s, _ in tensors]
    return json.dumps(meta, separators=(",", ":"))


def gpt_params(n_layer, d, seq, vocab, hf_names):
    out = []

    def add(name, shape):
        n = 1
        for x in shape:
            n *= x
        out.append((name, shape, [0.01 * (i % 7) for i in range(n)]))

    pre = "transformer." if hf_names else ""
    add(pre + ("wte.weight" if hf_names else "wte"), [vocab, d])
    add(pre + ("wpe.weight" if hf_names else "wpe"), [seq, d])
    for l in range(n_layer):
        h = "%sh.%d." % (pre, l)
        conv = (lambda o, i: [i, o]) if hf_names else (lambda o, i: [o, i])
        add(h + "ln_1.weight", [d])
        add(h + "ln_1.bias", [d])
        add(h + "attn.c_attn.weight", conv(3 * d, d))
        add(h + "attn.c_attn.bias", [3 * d])
        add(h + "attn.c_proj.weight", conv(d, d))
        add(h + "attn.c_proj.bias", [d])
        add(h + "ln_2.weight", [d])
        add(h + "ln_2.bias", [d])
        add(h + "mlp.c_fc.weight", conv(4 * d, d))
        add(h + "mlp.c_fc.bias", [4 * d])
        add(h + "mlp.c_proj.weight", conv(d, 4 * d))
        add(h + "mlp.c_proj.bias", [d])
    add(pre + "ln_f.weight", [d])
    add(pre + "ln_f.bias", [d])
    return out


def ckpt_input(flags, json_text, blob):
    return bytes([flags]) + json_text.encode() + b"\0" + blob


def checkpoints():
    mlp = [("fc0.weight", [2, 3], [1, 2, 3, 4, 5, 6]),
           ("fc0.bias", [2], [0.5, -0.5]),
           ("adamw.m.fc0.weight", [2, 3], [0] * 6),
           ("empty", [0, 4], [])]
    blob = safetensors(mlp, {"format": "pt", "producer": "trainyard"})
    write("checkpoint", "mlp-step1", ckpt_input(0, checkpoint_meta(mlp, blob),
                                                blob))
    write("checkpoint", "mlp-early-stopping", ckpt_input(0, checkpoint_meta(
        mlp, blob, early_stopping={"best_loss": 0.1 + 0.2, "best_step": 1,
                                   "evals_since_best": 0}), blob))
    # Flag 1: the target rewrites bytes and crc32 to match the tensors.
    write("checkpoint", "mlp-patched-crc",
          ckpt_input(1, checkpoint_meta(mlp, blob).replace(
              '"crc32":"', '"crc32":"0000').replace(
              '"bytes":%d' % len(blob), '"bytes":1'), blob))

    gpt = gpt_params(1, 4, 4, 8, hf_names=False)
    blob = safetensors(gpt)
    model = {"kind": "gpt", "n_layer": 1, "n_head": 2, "d_model": 4,
             "seq_len": 4, "vocab_size": 8}
    tok = {"kind": "char", "vocab": [10, 32, 97, 98, 99, 233, 8364, 128512]}
    write("checkpoint", "gpt-with-tokenizer",
          ckpt_input(0, checkpoint_meta(gpt, blob, step=7, model=model,
                                        tokenizer=tok), blob))

    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
              "vocab_size": 8, "n_positions": 4, "n_ctx": 4, "n_embd": 4,
              "n_layer": 1, "n_head": 2, "activation_function": "gelu_new",
              "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True}
    hf = gpt_params(1, 4, 4, 8, hf_names=True)
    hf.append(("lm_head.weight", [8, 4], [0.0] * 32))
    hf_blob = safetensors(hf, {"format": "pt"})
    write("checkpoint", "hf-gpt2-folder",
          ckpt_input(0, json.dumps(config), hf_blob))
    write("checkpoint", "hf-tokenizer-flag",
          ckpt_input(2, json.dumps(dict(config, kind="byte")), hf_blob))

    # Broken ones.
    write("checkpoint", "bad-truncated-tensors",
          ckpt_input(1, checkpoint_meta(mlp, blob), blob[:-5]))
    write("checkpoint", "bad-header-length",
          ckpt_input(0, "{}", struct.pack("<Q", 2 ** 63 + 5) + b"{}"))
    header = b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[8,-9]}}'
    write("checkpoint", "bad-offsets",
          ckpt_input(0, "{}", struct.pack("<Q", len(header)) + header +
                     b"\0" * 8))
    write("checkpoint", "bad-meta-json",
          ckpt_input(0, '{"magic":"trainyard-checkpoint","version":1,'
                        '"step":-1,"tensors":[{"name":1}]', b""))
    write("checkpoint", "bad-config-sizes",
          ckpt_input(0, json.dumps(dict(config, n_layer=10 ** 12,
                                        n_embd=-4)), hf_blob))


# --- token shards and IDX files ------------------------------------------------

def shard(tokens, count=None, magic=20240520, version=1):
    header = [magic, version, len(tokens) if count is None else count]
    header += [0] * (256 - len(header))
    return struct.pack("<256i", *header) + struct.pack(
        "<%dH" % len(tokens), *tokens)


def token_shards():
    write("token_shard", "small.bin", shard([1, 2, 3, 65535, 50256, 0, 7] * 3))
    write("token_shard", "empty.bin", shard([]))
    write("token_shard", "bad-count.bin", shard([1, 2, 3], count=2 ** 31 - 1))
    write("token_shard", "bad-negative.bin", shard([1, 2], count=-2))
    write("token_shard", "bad-magic.bin", shard([1], magic=20240521))
    write("token_shard", "bad-trailing.bin", shard([1, 2]) + b"\x01")
    write("token_shard", "bad-short-header.bin", shard([])[:100])


def idx(dims, data=None):
    n = 1
    for d in dims:
        n *= d
    head = struct.pack(">BBBB", 0, 0, 8, len(dims)) + struct.pack(
        ">%dI" % len(dims), *dims)
    return head + (bytes(i % 251 for i in range(n)) if data is None else data)


def gz(data):
    return gzip.compress(data, mtime=0)


def idx_files():
    images = idx([3, 4, 4])
    labels = idx([3], bytes([1, 9, 0]))
    write("idx", "images-raw.idx", images)
    write("idx", "images.idx.gz", gz(images))
    write("idx", "labels.idx.gz", gz(labels))
    write("idx", "two-members.gz", gz(images[:10]) + gz(images[10:]))
    write("idx", "bad-truncated.gz", gz(idx([20, 20]))[:-30])
    write("idx", "bad-trailing.gz", gz(labels) + b"junk")
    write("idx", "bad-huge-dims.idx", struct.pack(">BBBB4I", 0, 0, 8, 4,
                                                  *[0xFFFFFFFF] * 4))
    write("idx", "bad-type.idx", b"\0\0\x0d\x01\0\0\0\x02abcdefgh")
    write("idx", "bad-labels.idx", idx([2], bytes([3, 200])))
    # 4 MiB of zeros after a header promising 1 byte: compresses to ~4 KiB.
    write("idx", "bad-bomb.gz", gz(idx([1], b"\0" * (4 << 20))))


if __name__ == "__main__":
    specs()
    checkpoints()
    token_shards()
    idx_files()
