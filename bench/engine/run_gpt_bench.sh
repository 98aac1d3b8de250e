#!/usr/bin/env bash
# Runs the engine's GPT CPU benchmark and its PyTorch peer on the same
# config and thread count, one after the other, and prints both JSON lines.
# Needs build/bin/gpt_cpu_bench (cmake --build build --target gpt_cpu_bench)
# and a python3 with torch: $PYTHON, default /usr/bin/python3 (Debian:
# apt-get install python3-torch).
#
#   bench/engine/run_gpt_bench.sh [extra flags for both, e.g. --threads 2]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
config=(--threads 2 --steps 30 --warmup 3 --n_layer 4 --n_head 4
        --d_model 128 --seq_len 64 --vocab_size 65 --batch 16 "$@")
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
"$root/build/bin/gpt_cpu_bench" "${config[@]}"
# PyTorch's OpenMP threads busy-wait by default, which costs it several
# times its speed on a machine shared with other work; passive waiting is
# its best setting there (override with OMP_WAIT_POLICY=ACTIVE).
OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}" \
  "${PYTHON:-/usr/bin/python3}" "$root/bench/engine/gpt_torch_bench.py" \
  "${config[@]}"
