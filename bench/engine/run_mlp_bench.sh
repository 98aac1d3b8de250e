#!/usr/bin/env bash
# The MNIST MLP trained by `yard-train run` (CPU engine) and by its PyTorch
# peer (mlp_torch_bench.py, with denormals kept as PyTorch's default and
# flushed), at several learning rates, one after the other, for
# --rounds rounds: one JSON line each. A larger learning rate makes a more
# confident classifier, whose softmax and gradients hold denormal floats;
# the engine flushes them (engine/cpu/denormals.h).
#
#   bench/engine/run_mlp_bench.sh [--rounds N] [--steps N] [--lrs "A B ..."]
#                                 [YARD_TRAIN...]
#
# YARD_TRAIN: yard-train binaries to time (default build/bin/yard-train),
# e.g. an older build's beside the current one. Python: $PYTHON, default
# /usr/bin/python3 with torch (Debian: apt-get install python3-torch).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
rounds=3 steps=1500 lrs="0.00001 0.003 0.1" bins=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --lrs) lrs="$2"; shift 2 ;;
    -*) echo "run_mlp_bench: unknown flag $1" >&2; exit 2 ;;
    *) bins+=("$1"); shift ;;
  esac
done
[[ ${#bins[@]} -gt 0 ]] || bins=("$root/build/bin/yard-train")
images=examples/data/mnist/t10k-images-idx3-ubyte.gz
labels=examples/data/mnist/t10k-labels-idx1-ubyte.gz
work="$(mktemp -d "${TMPDIR:-/tmp}/yard-mlp-bench.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cat >"$work/spec.yaml" <<SPEC
name: mlp-bench
model: {mlp: {hidden: [128]}}
data: {mnist: {images: $images, labels: $labels, holdout: 2000}}
batch: {micro_batch: 32}
steps: $steps
log_every_steps: $steps
seed: 1
SPEC
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"
cd "$root"
for round in $(seq "$rounds"); do
  for lr in $lrs; do
    for bin in "${bins[@]}"; do
      rm -rf "$work/ckpt"
      # TrainFinished.wall_seconds: the run's steps, its final evaluation
      # and checkpoint (a few ms here).
      line="$("$bin" run "$work/spec.yaml" --set "optimizer.lr=$lr" \
        --checkpoint-dir "$work/ckpt" --progress json 2>/dev/null |
        grep '"finished"')"
      /usr/bin/python3 - "$bin" "$lr" "$steps" "$line" <<'PY'
import json, sys
bin_, lr, steps, line = sys.argv[1:5]
f = json.loads(line)["finished"]
s = float(f["wallSeconds"])
print(json.dumps({"impl": "trainyard", "bin": bin_, "lr": float(lr),
                  "steps": int(steps), "seconds": round(s, 3),
                  "ms_per_step": round(1000 * s / int(steps), 4),
                  "eval_loss": round(f.get("evalLoss", 0), 4),
                  "eval_accuracy": round(f.get("evalAccuracy", 0), 4)}))
PY
    done
    for flush in "" --flush_denormal; do
      "${PYTHON:-/usr/bin/python3}" "$root/bench/engine/mlp_torch_bench.py" \
        --images "$images" --labels "$labels" --steps "$steps" --lr "$lr" \
        $flush
    done
  done
done
