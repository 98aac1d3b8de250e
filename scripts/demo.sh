#!/usr/bin/env bash
# The `make demo` script: starts a local Trainyard cluster (one yard-server
# with its SQLite store in a temporary state dir, one yard-worker with one
# CPU slot, both on loopback), submits examples/mnist-mlp.yaml, follows it
# live, prints the held-out accuracy and where the checkpoint is, and shuts
# the cluster down, also on failure or Ctrl-C.
#
#   scripts/demo.sh [BIN_DIR [SPEC]]   (defaults: build/bin, examples/mnist-mlp.yaml)
#
# Exits 0 only when the job SUCCEEDED. Run from anywhere; the data root is
# the repository root, which holds examples/data.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Relative arguments are taken from the caller's directory, else the root.
absolute() { if [[ -e "$1" ]]; then echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; else echo "$ROOT/$1"; fi; }
BIN_DIR="$(absolute "${1:-build/bin}")"
SPEC="$(absolute "${2:-examples/mnist-mlp.yaml}")"

if [[ -t 1 ]]; then BOLD=$'\033[1m' PLAIN=$'\033[0m'; else BOLD="" PLAIN=""; fi
say() { printf '%s==> %s%s\n' "$BOLD" "$*" "$PLAIN"; }
info() { printf '    %s\n' "$*"; }
die() { printf 'demo: %s\n' "$*" >&2; exit 1; }

for bin in yard-server yard-worker yard yard-train; do
  [[ -x "$BIN_DIR/$bin" ]] || die "$BIN_DIR/$bin not found; build first (make build)"
done
[[ -f "$SPEC" ]] || die "$SPEC not found"

STATE_DIR="$(mktemp -d "${TMPDIR:-/tmp}/trainyard-demo.XXXXXX")"
LOG_DIR="$STATE_DIR/logs"
mkdir -p "$LOG_DIR"
SERVER_PID=""
WORKER_PID=""

# Stops one process: SIGTERM, then SIGKILL if it is still there after 15 s.
stop_process() {
  local pid="$1" name="$2"
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 150); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    info "$name did not stop within 15 s; killing it"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
}

cleanup() {
  local status=$?
  trap - EXIT INT TERM
  if [[ -n "$WORKER_PID$SERVER_PID" ]]; then
    say "Shutting the cluster down"
    stop_process "$WORKER_PID" yard-worker
    stop_process "$SERVER_PID" yard-server
  fi
  info "state, checkpoints and logs kept in $STATE_DIR (rm -rf it when done)"
  exit "$status"
}
trap cleanup EXIT
trap 'echo; info "interrupted"; exit 130' INT TERM

say "Trainyard demo"
info "state dir: $STATE_DIR"
info "logs:      $LOG_DIR/{yard-server,yard-worker}.log"

say "Starting yard-server on 127.0.0.1 (port picked at run time)"
cd "$ROOT"
"$BIN_DIR/yard-server" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 \
  --state-dir "$STATE_DIR/server" --data-root "$ROOT" >"$LOG_DIR/yard-server.log" 2>&1 &
SERVER_PID=$!

ADDR_FILE="$STATE_DIR/server/yard-server.addr"
for _ in $(seq 300); do
  [[ -s "$ADDR_FILE" ]] && break
  kill -0 "$SERVER_PID" 2>/dev/null ||
    { tail -n 20 "$LOG_DIR/yard-server.log" >&2; die "yard-server exited"; }
  sleep 0.1
done
[[ -s "$ADDR_FILE" ]] || die "yard-server wrote no address within 30 s (see $LOG_DIR/yard-server.log)"
ADDR="$(head -n 1 "$ADDR_FILE")"
info "listening on $ADDR"
METRICS_ADDR="$(head -n 1 "$STATE_DIR/server/yard-server.metrics-addr" 2>/dev/null || true)"
[[ -n "$METRICS_ADDR" ]] && info "metrics:   http://$METRICS_ADDR/metrics"

say "Starting yard-worker (1 CPU slot)"
"$BIN_DIR/yard-worker" --server "$ADDR" --work-dir "$STATE_DIR/worker" \
  --cpu-slots 1 --data-root "$ROOT" --name demo-worker \
  --metrics-listen 127.0.0.1:0 \
  --token-file "$STATE_DIR/server/worker.token" \
  >"$LOG_DIR/yard-worker.log" 2>&1 &
WORKER_PID=$!

# Every call needs a token. The server made an admin token on its first
# start (STATE_DIR/admin.token, 0600); with it we make one for tenant "demo".
say "Creating a token for tenant demo (admin token: server/admin.token)"
TOKEN="$("$BIN_DIR/yard" --server "$ADDR" \
  --token-file "$STATE_DIR/server/admin.token" \
  token create demo --description "make demo" | tail -n 1)"
[[ "$TOKEN" == ytk_* ]] || die "could not create a token for tenant demo"
info "token ${TOKEN:0:16}... (yard --token, \$YARD_TOKEN or the config file)"
YARD=("$BIN_DIR/yard" --server "$ADDR" --token "$TOKEN")
say "Submitting ${SPEC#"$ROOT"/} and following it live"
set +e
"${YARD[@]}" submit "$SPEC" --wait
SUBMIT_STATUS=$?
set -e

# The demo's cluster is fresh: its only job is ours.
JOB_ID="$("${YARD[@]}" -o json ls --all |
  grep -o '"id": *"[^"]*"' | head -n 1 | sed 's/.*: *"\(.*\)"/\1/' || true)"
[[ -n "$JOB_ID" ]] || die "no job was created (yard submit exited $SUBMIT_STATUS)"
JOB_JSON="$("${YARD[@]}" -o json get "$JOB_ID")"

# Fields of the job's JSON (protobuf mapping: lowerCamelCase or snake_case).
json_string() {
  grep -o "\"\\($1\\)\": *\"[^\"]*\"" <<<"$JOB_JSON" | head -n 1 |
    sed 's/.*: *"\(.*\)"/\1/'
}
json_number() {
  grep -o "\"\\($1\\)\": *[0-9.eE+-]*" <<<"$JOB_JSON" | head -n 1 |
    sed 's/.*: *//'
}
STATE="$(json_string 'state')"
ACCURACY="$(json_number 'evalAccuracy\|eval_accuracy')"
CHECKPOINT="$(json_string 'checkpointPath\|checkpoint_path')"

say "Result"
info "job:               $JOB_ID ($STATE)"
if [[ "$STATE" != "SUCCEEDED" || $SUBMIT_STATUS -ne 0 ]]; then
  REASON="$(json_string 'stateReason\|state_reason')"
  info "reason:            ${REASON:-see yard logs $JOB_ID}"
  die "the job did not succeed (yard submit exited $SUBMIT_STATUS)"
fi
info "held-out accuracy: $(awk -v a="${ACCURACY:-0}" 'BEGIN { printf "%.2f%%", a * 100 }')"
info "checkpoint:        $CHECKPOINT"

say "Its training curve (yard metrics $JOB_ID)"
"${YARD[@]}" metrics "$JOB_ID" | sed 's/^/    /'
