#!/usr/bin/env bash
# Bounded libFuzzer runs of the fuzz targets in fuzz/.
#
# Configures a clang build dir (default build-fuzz/) with every library
# instrumented for coverage, AddressSanitizer and UndefinedBehaviorSanitizer,
# builds only the fuzz targets and what they link, then runs each target for
# FUZZ_SECONDS (default 30) on a fresh copy of its seed corpus, with an RSS
# and single-allocation cap of 2 GiB and a 10 s per-input timeout. Exits 1
# if any target crashed, hit a sanitizer report, leaked, timed out or went
# over the memory cap; the input that did it is kept under
# BUILD/fuzz-findings/<target>/ and the command to replay it is printed.
# Nothing is written into the repository's corpus: add a finding to
# fuzz/corpus/<target>/ by hand, with the fix and its regression test.
#
#   scripts/run-fuzzers.sh                  all targets, 30 s each
#   FUZZ_SECONDS=5 scripts/run-fuzzers.sh   a short run (CI)
#   scripts/run-fuzzers.sh spec idx         some targets
#
# Environment: FUZZ_SECONDS, FUZZ_BUILD_DIR (build-fuzz), FUZZ_JOBS (2,
# build parallelism), FUZZ_CC/FUZZ_CXX (clang/clang++; not CC/CXX, which
# may name the gcc of the main build).
set -euo pipefail

cd "$(dirname "$0")/.."
build=${FUZZ_BUILD_DIR:-build-fuzz}
seconds=${FUZZ_SECONDS:-30}
jobs=${FUZZ_JOBS:-2}
all_targets=(spec checkpoint token_shard idx)
targets=("$@")
[[ ${#targets[@]} -eq 0 ]] && targets=("${all_targets[@]}")

# Inputs longer than a target needs only slow the search down.
max_len() {
  case $1 in
    spec) echo 4096 ;;
    token_shard) echo 8192 ;;
    *) echo 65536 ;;
  esac
}

for t in "${targets[@]}"; do
  [[ -d fuzz/corpus/$t ]] || { echo "run-fuzzers: no target '$t'" >&2; exit 2; }
done

sanitize="-fsanitize=fuzzer-no-link,address,undefined"
sanitize+=" -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
echo "run-fuzzers: configuring $build (clang, libFuzzer + ASan + UBSan)"
cmake -S . -B "$build" \
  -DCMAKE_C_COMPILER="${FUZZ_CC:-clang}" \
  -DCMAKE_CXX_COMPILER="${FUZZ_CXX:-clang++}" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DCMAKE_C_FLAGS="$sanitize" -DCMAKE_CXX_FLAGS="$sanitize" \
  -DYARD_FUZZ=ON -DYARD_CUDA=OFF >/dev/null
build_targets=()
for t in "${targets[@]}"; do build_targets+=("fuzz_$t"); done
cmake --build "$build" -j "$jobs" --target "${build_targets[@]}"

# Two-frame allocation stacks. ASan keeps every distinct allocation stack for
# good, and its frame-pointer unwinder reads garbage past the Debian
# libraries (built without frame pointers), so longer stacks are new on
# nearly every call: the stack depot grew by ~4M entries a minute, which
# the RSS cap takes for a leak. The stack of a crash itself stays complete.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:malloc_context_size=2}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
failed=()
summary=()
for t in "${targets[@]}"; do
  run="$build/fuzz-run/$t"
  findings="$build/fuzz-findings/$t"
  rm -rf "$run"
  mkdir -p "$run/corpus" "$findings"
  cp fuzz/corpus/"$t"/* "$run/corpus/"
  log="$run/fuzz.log"
  echo "run-fuzzers: fuzz_$t for ${seconds}s (log: $log)"
  dict=()
  [[ -f fuzz/$t.dict ]] && dict=(-dict="fuzz/$t.dict")
  status=0
  "$build/fuzz/fuzz_$t" "${dict[@]}" \
    -max_total_time="$seconds" -max_len="$(max_len "$t")" \
    -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=10 \
    -print_final_stats=1 -artifact_prefix="$findings/" \
    "$run/corpus" >"$log" 2>&1 || status=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  corpus=$(find "$run/corpus" -type f | wc -l)
  if [[ $status -ne 0 ]]; then
    failed+=("$t")
    summary+=("$(printf '%-12s FAILED (exit %d) after %s runs' "$t" "$status" "${execs:-?}")")
    grep -E "ERROR|runtime error|Test unit written|SUMMARY" "$log" | head -20 >&2 || true
  else
    summary+=("$(printf '%-12s ok  %s s  %s runs  corpus %d inputs' "$t" "$seconds" "${execs:-?}" "$corpus")")
  fi
done

echo "run-fuzzers: summary"
printf '  %s\n' "${summary[@]}"
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "run-fuzzers: ${failed[*]} failed; inputs under $build/fuzz-findings/;" \
       "replay one with $build/fuzz/fuzz_<target> <input>" >&2
  exit 1
fi
