#!/usr/bin/env bash
# The command a lent GPU machine runs, over the working tree and the kit
# made here by scripts/gpu/make-kit.sh (carried as .gpu-kit):
#
#   bash scripts/gpu/run-on-device.sh [tests|engine|packing|kernels|gemms|
#                                      quick|tilings|first|profile|sass|batches|all]
#                                      [SECONDS]
#
#   tests    the gpu-labelled tests, then the kernel tests under
#            compute-sanitizer memcheck if there is one (device.log)
#   engine   gpt_train_bench fp32 + bf16 and the PyTorch peer eager +
#            torch.compile, GPT-2 124M at the largest micro-batch and the
#            shakespeare config (engine.log, engine.csv); where the kit
#            carries gemm-choices.txt (from `gemms`), the 124M bf16 step
#            again with YARD_GEMM_CHOICES right after the peer
#   packing  bench/packing: four shakespeare jobs packed vs one after
#            another, without and with MPS (packing.log, packing/*.csv,
#            packing/summary.txt)
#   kernels  attention_bench and its PyTorch peer (scaled_dot_product_attention)
#            at a GPT-2 124M layer's shape (micro-batch 16, hs 64) and at
#            hs 128 (kernels.log, kernels.csv): seconds, for a kernel change
#   quick    kernels, then gpt_train_bench 124M bf16 alone with its op
#            profile (engine.log, engine.csv): a change's effect on the
#            step without the minutes of the PyTorch peer; figures to
#            record come from `engine`, which measures the peer too
#   gemms    gemm_bench (the linear layers' products of a GPT-2 124M step
#            at micro-batch 176, each cuBLASLt candidate timed; the fastest
#            written to gemm-choices.txt; the bias gradients by column sums
#            and by the BGRADB epilogue) and its PyTorch peer (gemms.log,
#            gemms.csv), then gpt_train_bench 124M bf16 as it is, with
#            YARD_BIAS_GRADIENT=epilogue, and with
#            YARD_GEMM_CHOICES=gemm-choices.txt and =auto (the job timing
#            them itself; engine.log, engine.csv): whether the epilogue and
#            choosing among the candidates pay
#   tilings  kernels, then gpt_train_bench 124M bf16 with the attention
#            tiling 16x4, auto, 16x4-swizzled, wgmma-swizzled, wgmma (the
#            warpgroup forward), 16x8-swizzled, wgmma2-swizzled, 16x4 and
#            wgmma with YARD_ATTENTION_BACKWARD=ordered-dq, 16x8, wgmma2,
#            32x2 and 32x4
#            (YARD_ATTENTION_TILING; engine.log, engine.csv in that order):
#            which tiling and backward the backend should run by default
#   first    the most one call says about changes that have never run on
#            a GPU: cuda_attention_test (the warpgroup product check
#            first), attention_bench at a GPT-2 124M layer's shape (every
#            tiling), gpt_train_bench 124M bf16 as it is (with its op
#            profile) and with YARD_ATTENTION_TILING=auto (the job
#            timing every tiling's forward and backward at the step's own
#            shape, then running the fastest of each), with
#            YARD_ATTENTION_BACKWARD=ordered-dq where attention_bench times
#            it faster than the two kernels, and the PyTorch peer (eager,
#            torch.compile) (device.log, kernels.log, kernels.csv,
#            engine.log, engine.csv)
#   profile  Nsight Compute (ncu --set full) on attention_bench at a GPT-2
#            124M layer's shape, one kernel at a time: the 16x4 forward,
#            the warpgroup forward, the key side and the query gradient
#            of the two-kernel backward, then the 16x4-swizzled tiling's
#            three and the wgmma-swizzled forward (ncu-*.txt): where the
#            attention kernels' time goes, for the next change to them
#   sass     as profile for the 16x4 forward, the warpgroup forward and
#            the key side, with ncu's source page: each SASS instruction
#            with its counters (sass-*.csv), e.g. which loads or stores
#            fetch the excess sectors that profile reports
#   batches  gpt_train_bench 124M bf16 at micro-batches 64, 96, 128, 160
#            and the largest (engine.log, engine.csv): whether the largest
#            that fits is also the fastest
#   all      tests, engine and packing in that order, sharing one budget
#
# Every command runs under a timeout cut from SECONDS (default 540, so one
# device call stays inside its 10 minutes); what no longer fits is skipped
# and says so. Logs and CSVs go to $OUT (the device tool's folder; default
# ./gpu-out): at most 7 files, one folder deep.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
kit="$root/.gpu-kit"
what="${1:-all}"
budget="${2:-540}"
out="${OUT:-$root/gpu-out}"
mkdir -p "$out"
deadline=$((SECONDS + budget))
log="$out/device.log"

note() { echo "== $*" | tee -a "$log"; }

# Runs "$@" with at most min(LIMIT, time left - 10 s); appends to LOGFILE.
bounded() {
  local limit=$1 logfile=$2
  shift 2
  local left=$((deadline - SECONDS - 10))
  ((left < limit)) && limit=$left
  if ((limit < 15)); then
    echo "== SKIPPED (out of time): $*" | tee -a "$logfile"
    return 124
  fi
  echo "== [$(date -u +%T), limit ${limit}s] $*" | tee -a "$logfile"
  timeout -k 10 "$limit" "$@" >>"$logfile" 2>&1
  local rc=$?
  echo "== exit $rc" | tee -a "$logfile"
  return $rc
}

# The kit's Debian libraries first; CUDA's own (cuBLAS, NCCL) from wherever
# this machine keeps them: the toolkit, or the wheels beside PyTorch.
setup_libraries() {
  local dirs=("$kit/lib") d lib found
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib \
    /usr/local/cuda/targets/x86_64-linux/lib; do
    [[ -d "$d" ]] && dirs+=("$d")
  done
  export LD_LIBRARY_PATH="$(IFS=:; echo "${dirs[*]}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  local wheels
  wheels="$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])' 2>/dev/null)"
  for lib in $(for b in "$kit"/bin/*; do ldd "$b"; done | awk '/not found/ {print $1}' | sort -u); do
    found="$(find ${wheels:+"$wheels"} /usr/local /usr/lib /opt -name "$lib" 2>/dev/null | head -n 1)"
    [[ -n "$found" ]] && LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$(dirname "$found")"
  done
  export LD_LIBRARY_PATH
}

describe_machine() {
  {
    echo "== $(date -u +%FT%TZ) run-on-device.sh $what (budget ${budget}s)"
    cat "$kit/MANIFEST" 2>/dev/null
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv 2>&1
    nvcc --version 2>&1 | tail -n 2
    python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)' 2>&1
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    echo "which nvidia-cuda-mps-control: $(command -v nvidia-cuda-mps-control || echo none)"
    for b in "$kit"/bin/*; do
      ldd "$b" | grep -q 'not found' &&
        echo "MISSING LIBRARIES for $(basename "$b"):" &&
        ldd "$b" | grep 'not found'
    done
  } >>"$log" 2>&1
}

# A gtest binary whose tests skip still exits 0, so skips are counted from
# its output. Some skip for good reasons (two-GPU tests on one GPU), but
# when device_query_test's device listing skips, the GPU is not usable here
# (no device seen) and every other test would only skip too: stop there.
run_tests() {
  local t passed=0 failed=() skipped=() before after
  while IFS= read -r t; do
    [[ -n "$t" ]] || continue
    before=$(wc -l <"$log")
    if bounded 240 "$log" "$kit/bin/$t" --gtest_color=no; then
      after=$(tail -n +$((before + 1)) "$log")
      if grep -q '^\[  SKIPPED \]' <<<"$after"; then
        skipped+=("$t")
        if grep -q '^\[  SKIPPED \] DeviceQueryTest\.ListsDevices' <<<"$after"; then
          note "device_query_test skipped: the GPU is not usable here"
          grep -v '^==' <<<"$after" | grep -m 3 -iE 'driver|device' |
            tee -a "$log"
          break
        fi
      else
        passed=$((passed + 1))
      fi
    else
      failed+=("$t")
    fi
  done < <(grep -x device_query_test "$kit/gpu-tests.txt"
    grep -vx device_query_test "$kit/gpu-tests.txt")
  note "gpu tests: $passed passed; skipped some tests: ${skipped[*]:-none}; failed or out of time: ${failed[*]:-none}"
  grep -E '^\[  (FAILED|SKIPPED) |^\[  PASSED|^\[==========\] [0-9]+ tests' "$log" | tail -n 30
  # Then the kernel tests again under compute-sanitizer's memcheck, which
  # reports any out-of-bounds or misaligned device access, while time lasts.
  local sanitizer
  sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
  if [[ -x "$sanitizer" ]]; then
    for t in cuda_attention_test cuda_ops_test cuda_layer_ops_test; do
      grep -qx "$t" "$kit/gpu-tests.txt" || continue
      bounded 180 "$log" "$sanitizer" --tool memcheck --error-exitcode 9 \
        "$kit/bin/$t" --gtest_color=no --gtest_brief=1
    done
  else
    note "no compute-sanitizer on this machine: memcheck skipped"
  fi
}

run_engine() {
  local elog="$out/engine.log" csv="$out/engine.csv"
  local ours=("$kit/bin/gpt_train_bench" --data-root "$root" --csv "$csv")
  local torch=(python3 "$root/bench/engine/gpt_torch_gpu_bench.py" --csv "$csv")
  export PYTHONUNBUFFERED=1
  # Most wanted first: what the issue's target compares.
  bounded 110 "$elog" "${ours[@]}" --config 124m --precision bf16 --micro-batch max --profile-steps 2
  bounded 240 "$elog" "${torch[@]}" --config 124m --precision bf16 --micro-batch max
  # With the cuBLASLt candidates gemm_bench found fastest on this GPU
  # model, when the kit carries them (.gpu-kit/gemm-choices.txt).
  if [[ -s "$kit/gemm-choices.txt" ]]; then
    note "gpt_train_bench 124m bf16 with YARD_GEMM_CHOICES=$kit/gemm-choices.txt (next row of engine.csv)"
    YARD_GEMM_CHOICES="$kit/gemm-choices.txt" bounded 110 "$elog" "${ours[@]}" \
      --config 124m --precision bf16 --micro-batch max
  fi
  bounded 110 "$elog" "${ours[@]}" --config 124m --precision fp32 --micro-batch max
  bounded 40 "$elog" "${ours[@]}" --config shakespeare --precision bf16 --steps 50 --warmup 10 --profile-steps 5
  bounded 40 "$elog" "${ours[@]}" --config shakespeare --precision fp32 --steps 50 --warmup 10
  bounded 120 "$elog" "${torch[@]}" --config shakespeare --precision bf16 --micro-batch 16 --steps 50 --warmup 10
  note "engine: results in engine.csv"
  column -s, -t "$csv" 2>/dev/null | tee -a "$log" || cat "$csv"
  grep '^PROFILE' "$elog" | tee -a "$log"
}

run_kernels() {
  local klog="$out/kernels.log" csv="$out/kernels.csv"
  export PYTHONUNBUFFERED=1
  local shape
  for shape in "--heads 12 --head-size 64" "--heads 6 --head-size 128"; do
    # shellcheck disable=SC2086
    bounded 30 "$klog" "$kit/bin/attention_bench" --batch 16 --seq 1024 $shape --csv "$csv"
    # shellcheck disable=SC2086
    bounded 60 "$klog" python3 "$root/bench/engine/attention_torch_bench.py" --batch 16 --seq 1024 $shape --csv "$csv"
  done
  note "kernels: results in kernels.csv"
  grep -E '^(attention|torch sdpa)' "$klog" | tee -a "$log"
}

run_gemms() {
  local glog="$out/gemms.log" csv="$out/gemms.csv" choices="$out/gemm-choices.txt"
  local elog="$out/engine.log" ecsv="$out/engine.csv" with
  export PYTHONUNBUFFERED=1
  bounded 200 "$glog" "$kit/bin/gemm_bench" --csv "$csv" --choices "$choices"
  bounded 90 "$glog" python3 "$root/bench/engine/gemm_torch_bench.py" --csv "$csv"
  note "gemms: results in gemms.csv"
  grep -vE '^== ' "$glog" | tee -a "$log"
  # The step as it is, with the bias gradient epilogue, with the fastest
  # candidates of gemm_bench, and with those the job times itself.
  for with in "" epilogue "$choices" auto; do
    [[ -z "$with" || "$with" == epilogue || "$with" == auto || -s "$with" ]] || continue
    local bias=column-sums picks=""
    if [[ "$with" == epilogue ]]; then bias=epilogue; elif [[ -n "$with" ]]; then picks=$with; fi
    note "gpt_train_bench 124m bf16, YARD_BIAS_GRADIENT=$bias${picks:+, YARD_GEMM_CHOICES=$picks}"
    YARD_BIAS_GRADIENT="$bias" YARD_GEMM_CHOICES="$picks" bounded 110 "$elog" \
      "$kit/bin/gpt_train_bench" --data-root "$root" --csv "$ecsv" \
      --config 124m --precision bf16 --micro-batch max --profile-steps 2
    grep -E '^step |^PROFILE +Linear|gemm choices: timed' "$elog" | tail -n 6 | tee -a "$log"
  done
}

run_quick() {
  run_kernels
  local elog="$out/engine.log" csv="$out/engine.csv"
  bounded 110 "$elog" "$kit/bin/gpt_train_bench" --data-root "$root" --csv "$csv" \
    --config 124m --precision bf16 --micro-batch max --profile-steps 2
  column -s, -t "$csv" 2>/dev/null | tee -a "$log" || cat "$csv"
  grep '^PROFILE' "$elog" | tee -a "$log"
}

run_tilings() {
  run_kernels
  local elog="$out/engine.log" csv="$out/engine.csv" t
  # The warpgroup forward and the ordered backward right after the default
  # tiling they are measured against, before the other tilings in case the
  # budget runs out.
  for t in 16x4 auto 16x4-swizzled wgmma-swizzled wgmma 16x8-swizzled wgmma2-swizzled ordered-dq ordered-wgmma 16x8 wgmma2 32x2 32x4; do
    note "$t: gpt_train_bench 124m bf16"
    if [[ "$t" == ordered-dq ]]; then
      export YARD_ATTENTION_BACKWARD=ordered-dq YARD_ATTENTION_TILING=16x4
    elif [[ "$t" == ordered-wgmma ]]; then
      export YARD_ATTENTION_BACKWARD=ordered-dq YARD_ATTENTION_TILING=wgmma
    else
      export YARD_ATTENTION_BACKWARD=two-kernel YARD_ATTENTION_TILING=$t
    fi
    bounded 110 "$elog" "$kit/bin/gpt_train_bench" \
      --data-root "$root" --csv "$csv" --config 124m --precision bf16 \
      --micro-batch max --profile-steps 2
    grep -E '^micro-batch [0-9]+ ran|^step |^PROFILE +Attention' "$elog" | tail -n 4 | sed "s/^/$t /" | tee -a "$log"
  done
  unset YARD_ATTENTION_BACKWARD YARD_ATTENTION_TILING
  column -s, -t "$csv" 2>/dev/null | tee -a "$log" || cat "$csv"
}

run_first() {
  local elog="$out/engine.log" csv="$out/engine.csv" klog="$out/kernels.log"
  local ours=("$kit/bin/gpt_train_bench" --data-root "$root" --csv "$csv"
    --config 124m --precision bf16 --micro-batch max --profile-steps 2)
  export PYTHONUNBUFFERED=1
  if grep -qx cuda_attention_test "$kit/gpu-tests.txt"; then
    bounded 30 "$log" "$kit/bin/cuda_attention_test" --gtest_color=no \
      --gtest_filter='WarpgroupProductTest.*'
    bounded 120 "$log" "$kit/bin/cuda_attention_test" --gtest_color=no \
      --gtest_brief=1 --gtest_filter='-WarpgroupProductTest.*'
  fi
  bounded 30 "$klog" "$kit/bin/attention_bench" --batch 16 --seq 1024 \
    --heads 12 --head-size 64 --csv "$out/kernels.csv"
  grep -E '^attention' "$klog" | tee -a "$log"
  note "gpt_train_bench 124m bf16 as it is"
  bounded 110 "$elog" "${ours[@]}"
  grep -E '^step |^PROFILE' "$elog" | tee -a "$log"
  # Every attention tiling timed by the job itself at the step's own shape
  # (YARD_ATTENTION_TILING=auto: each one's forward and backward in the
  # log), then the step with the fastest of each.
  note "gpt_train_bench 124m bf16, YARD_ATTENTION_TILING=auto"
  YARD_ATTENTION_TILING=auto bounded 120 "$elog" "${ours[@]}"
  grep -E 'attention tilings: |^step |^PROFILE +Attention' "$elog" | tail -n 26 | tee -a "$log"
  # The ordered backward (its dQ adds now L2 reductions) where
  # attention_bench found it faster than the two kernels.
  if grep -E '^attention backward ordered-dq:' "$klog" | tail -n 1 |
    grep -qE ', 0\.[0-9]+x the two'; then
    note "gpt_train_bench 124m bf16, YARD_ATTENTION_BACKWARD=ordered-dq"
    YARD_ATTENTION_BACKWARD=ordered-dq bounded 110 "$elog" "${ours[@]}"
    grep -E '^step |^PROFILE +Attention' "$elog" | tail -n 4 | tee -a "$log"
  fi
  bounded 240 "$elog" python3 "$root/bench/engine/gpt_torch_gpu_bench.py" \
    --csv "$csv" --config 124m --precision bf16 --micro-batch max
  # (The unswizzled wgmma tiling and the ordered backward were timed on
  # 2026-11-24, both slower; `tilings` times them again.)
  column -s, -t "$csv" 2>/dev/null | tee -a "$log" || cat "$csv"
}

run_profile() {
  local ncu k name
  ncu="$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)"
  [[ -n "$ncu" && -x "$ncu" ]] || { note "profile: no ncu on this machine"; return; }
  # name:kernel; each one's first launch in attention_bench is the one
  # profiled: the default tiling's (16x4) where the kernel has several.
  # The swizzled tiling's kernels are the ones whose last template
  # argument is true (matched on the demangled name).
  local swz='<[^<>]*(true|\(bool\)1)>'
  for k in fwd16x4:AttentionForwardTcKernel fwdwgmma:AttentionForwardWgKernel \
    keyside:AttentionKeySideTcKernel querygrad:AttentionQueryGradTcKernel \
    "fwdswz:AttentionForwardTcKernel$swz" "keysideswz:AttentionKeySideTcKernel$swz" \
    "querygradswz:AttentionQueryGradTcKernel$swz" \
    "fwdwgswz:AttentionForwardWgKernel$swz"; do
    IFS=: read -r name regex <<<"$k"
    bounded 90 "$out/ncu-$name.txt" "$ncu" --set full --kernel-name-base demangled \
      -k "regex:$regex" -c 1 "$kit/bin/attention_bench" --batch 16 --seq 1024 \
      --heads 12 --head-size 64
    grep -E 'Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit|Executed Ipc A|Issue Slots Busy|No Eligible' \
      "$out/ncu-$name.txt" | sed "s/^/$name /" | tee -a "$log"
  done
}

run_sass() {
  local ncu k
  ncu="$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)"
  [[ -n "$ncu" && -x "$ncu" ]] || { note "sass: no ncu on this machine"; return; }
  local swz='<[^<>]*(true|\(bool\)1)>' name regex
  for k in fwd16x4:AttentionForwardTcKernel fwdwgmma:AttentionForwardWgKernel \
    keyside:AttentionKeySideTcKernel "fwdswz:AttentionForwardTcKernel$swz" \
    "fwdwgswz:AttentionForwardWgKernel$swz"; do
    IFS=: read -r name regex <<<"$k"
    bounded 90 "$log" "$ncu" --set full --import-source yes \
      --kernel-name-base demangled -k "regex:$regex" -c 1 \
      -o "/tmp/$name" "$kit/bin/attention_bench" --batch 16 --seq 1024 --heads 12 \
      --head-size 64
    bounded 60 "$out/sass-$name.csv" "$ncu" -i "/tmp/$name.ncu-rep" --page source \
      --csv --print-source sass
    wc -l "$out/sass-$name.csv" | tee -a "$log"
  done
}

run_batches() {
  local elog="$out/engine.log" csv="$out/engine.csv" mb
  for mb in 64 96 128 160 max; do
    bounded 110 "$elog" "$kit/bin/gpt_train_bench" --data-root "$root" \
      --csv "$csv" --config 124m --precision bf16 --micro-batch "$mb"
    grep -E '^step ' "$elog" | tail -n 1 | sed "s/^/micro-batch $mb: /" | tee -a "$log"
  done
}

run_packing() {
  local plog="$out/packing.log"
  local left=$((deadline - SECONDS - 20))
  if ((left < 60)); then
    note "packing: SKIPPED (out of time)"
    return
  fi
  # The driver bounds each job; the whole run gets what is left.
  bounded "$left" "$plog" python3 "$root/bench/packing/packing_bench.py" \
    --bin "$kit/bin" --out "$out/packing" --data-root "$root" \
    --steps "${PACKING_STEPS:-2000}" --timeout-s 120
  cat "$out/packing/summary.txt" 2>/dev/null | tee -a "$log"
}

# The kit travels packed (kit.tar.gz: the device tool carries at most 64 MiB);
# unpack it once beside itself.
if [[ ! -d "$kit/bin" && -f "$kit/kit.tar.gz" ]]; then
  tar -C "$kit" -xzf "$kit/kit.tar.gz" ||
    { echo "cannot unpack $kit/kit.tar.gz" >&2; exit 2; }
fi
[[ -d "$kit/bin" ]] || { echo "no $kit: run scripts/gpu/make-kit.sh here and carry .gpu-kit" >&2; exit 2; }
setup_libraries
describe_machine
case "$what" in
  tests) run_tests ;;
  engine) run_engine ;;
  packing) run_packing ;;
  kernels) run_kernels ;;
  gemms) run_gemms ;;
  quick) run_quick ;;
  tilings) run_tilings ;;
  first) run_first ;;
  profile) run_profile ;;
  sass) run_sass ;;
  batches) run_batches ;;
  all) run_tests; run_engine; run_packing ;;
  *) echo "usage: run-on-device.sh [tests|engine|packing|kernels|gemms|quick|tilings|first|profile|sass|batches|all] [SECONDS]" >&2; exit 2 ;;
esac
note "done in ${SECONDS}s; files in $out: $(cd "$out" && find . -type f | sort | tr '\n' ' ')"
