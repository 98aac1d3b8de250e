#!/usr/bin/env bash
# Successive halving against the full grid, on a real local cluster: the
# same sweep submitted with `yard submit --sweep ... --wait`, once without
# --halving (every job runs all its steps: the baseline) and with
# --halving in both orders of its values (ASHA ranks a job only against
# those that reached the rung before it, so the order counts). Prints, per
# run, the steps trained (all jobs), the worker slot time the jobs held
# (their attempts), the sweep's wall time and the best job it found.
#
#   bench/sweep/halving_bench.sh [--rounds N] [--slots N] [--steps N]
#                                [--halving STEPS:FACTOR] [BIN_DIR]
#
# Defaults: 3 rounds of the three runs, interleaved; a worker of 2 CPU
# slots (one job a slot, so at most 2 at once); MNIST MLP (hidden 128,
# micro-batch 32) for 1500 steps, evaluated every 50 on 2,000 held-out
# images, over 9 learning rates from 1e-5 to 0.1; --halving 100:3 (rungs
# at 100, 300 and 900 steps). Needs python3 (standard library only) to read
# the jobs' JSON.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
ROUNDS=3 SLOTS=2 STEPS=1500 HALVING=100:3 BIN_DIR="$ROOT/build/bin"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) ROUNDS="$2"; shift 2 ;;
    --slots) SLOTS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --halving) HALVING="$2"; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    -*) echo "halving_bench: unknown flag $1" >&2; exit 2 ;;
    *) BIN_DIR="$1"; shift ;;
  esac
done
for bin in yard-server yard-worker yard yard-train; do
  [[ -x "$BIN_DIR/$bin" ]] || { echo "halving_bench: $BIN_DIR/$bin not found" >&2; exit 2; }
done
command -v python3 >/dev/null || { echo "halving_bench: needs python3" >&2; exit 2; }

LRS_UP="0.00001,0.00003,0.0001,0.0003,0.001,0.003,0.01,0.03,0.1"
LRS_DOWN="0.1,0.03,0.01,0.003,0.001,0.0003,0.0001,0.00003,0.00001"

DIR="$(mktemp -d "${TMPDIR:-/tmp}/yard-halving-bench.XXXXXX")"
SERVER_PID="" WORKER_PID=""
cleanup() {
  for pid in $WORKER_PID $SERVER_PID; do
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$DIR"
}
trap cleanup EXIT

cd "$ROOT"
"$BIN_DIR/yard-server" --listen 127.0.0.1:0 --metrics-listen "" \
  --state-dir "$DIR/server" --data-root "$ROOT" >"$DIR/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 300); do [[ -s "$DIR/server/yard-server.addr" ]] && break; sleep 0.1; done
ADDR="$(head -n 1 "$DIR/server/yard-server.addr")"
"$BIN_DIR/yard-worker" --server "$ADDR" --work-dir "$DIR/worker" \
  --cpu-slots "$SLOTS" --data-root "$ROOT" --metrics-listen "" \
  --token-file "$DIR/server/worker.token" >"$DIR/worker.log" 2>&1 &
WORKER_PID=$!
YARD=("$BIN_DIR/yard" --server "$ADDR" --token-file "$DIR/server/admin.token")

cat >"$DIR/spec.yaml" <<EOF
name: lr
model: {mlp: {hidden: [128]}}
data:
  mnist:
    images: examples/data/mnist/t10k-images-idx3-ubyte.gz
    labels: examples/data/mnist/t10k-labels-idx1-ubyte.gz
    holdout: 2000
batch: {micro_batch: 32}
steps: $STEPS
eval: {every_steps: 50}
log_every_steps: 50
seed: 1
EOF

# One sweep: its request id, then the flags; prints a line of figures.
run() {
  local id="$1" label="$2"; shift 2
  local start end
  start=$(date +%s.%N)
  "${YARD[@]}" submit "$DIR/spec.yaml" --max-running "$SLOTS" \
    --request-id "$id" --wait "$@" >"$DIR/$id.out" 2>&1 ||
    { cat "$DIR/$id.out" >&2; echo "halving_bench: sweep $id failed" >&2; exit 1; }
  end=$(date +%s.%N)
  "${YARD[@]}" -o json ls --all >"$DIR/$id.json"
  python3 - "$DIR/$id.json" "$id" "$label" "$start" "$end" <<'PY'
import json, sys
from datetime import datetime
path, sweep, label, start, end = sys.argv[1:6]
def seconds(ts):
    # RFC 3339 with up to nanoseconds and a Z.
    ts = ts.rstrip("Z")
    if "." in ts:
        head, frac = ts.split(".")
        ts = f"{head}.{frac[:6]}"
    else:
        ts += ".0"
    return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%f").timestamp()
text = open(path).read()
jobs = []
dec = json.JSONDecoder()
i = 0
while i < len(text):
    while i < len(text) and text[i].isspace():
        i += 1
    if i >= len(text):
        break
    obj, i = dec.raw_decode(text, i)
    jobs.extend(obj.get("jobs", [obj]) if isinstance(obj, dict) else obj)
mine = [j for j in jobs if j.get("request_id", "").startswith(sweep + "-")]
steps = sum(int(j["result"]["step"]) for j in mine)
held = sum(seconds(a["end_time"]) - seconds(a["start_time"])
           for j in mine for a in j["attempts"])
halved = sum(1 for j in mine if j.get("halving_stop", {}).get("rung"))
ran_on = [j for j in mine if not j.get("halving_stop", {}).get("rung")]
best = max(ran_on, key=lambda j: j["result"]["eval_accuracy"])
print(f"{label:16s} jobs {len(mine)}  halved {halved}  steps {steps:6d}  "
      f"slot-s {held:7.1f}  wall-s {float(end) - float(start):6.1f}  "
      f"best lr {best['spec']['optimizer']['lr']:g} "
      f"acc {100 * best['result']['eval_accuracy']:.2f}% "
      f"eval-loss {best['result']['eval_loss']:.4f}")
PY
}

echo "halving_bench: $(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $SLOTS slots, $STEPS steps, --halving $HALVING"
for round in $(seq "$ROUNDS"); do
  run "grid$round" "grid" --sweep "optimizer.lr=$LRS_UP"
  run "up$round" "halving lr-up" --sweep "optimizer.lr=$LRS_UP" --halving "$HALVING"
  run "down$round" "halving lr-down" --sweep "optimizer.lr=$LRS_DOWN" --halving "$HALVING"
done
