#!/usr/bin/env bash
# The test suite under a sanitizer: every library, binary and test built
# with gcc's AddressSanitizer + UndefinedBehaviorSanitizer (`address`) or
# ThreadSanitizer (`thread`), then ctest. The daemons, CLIs and yard-train
# the tests start are the instrumented ones too, so a report in any process
# counts: every report is written under BUILD/sanitizer-reports/ (ASan's and
# TSan's log_path) and the run fails if one was written, whatever the test
# that started the process made of its exit.
#
#   scripts/run-sanitized-tests.sh address             build-asan/, all tests
#   scripts/run-sanitized-tests.sh thread              build-tsan/
#   scripts/run-sanitized-tests.sh thread -R worker_   ctest arguments after
#
# Without a GPU and with YARD_CUDA=OFF: the CUDA kernels run on the host
# emulation (label `emulation`) under `address`; under `thread` the
# emulation is not built (-DYARD_CUDA_EMULATION=OFF), as its fibers switch
# stacks, which ThreadSanitizer does not follow. The Debian libraries
# (gRPC, protobuf, abseil, SQLite) are not instrumented: ASan still checks
# every access our code makes to their memory. TSan cannot see what their
# atomics order: absl::Mutex, CondVar and Notification (which gRPC locks and
# waits with too) are told to it by common/tsan_absl_sync.cc
# (-DYARD_TSAN=ON); what gRPC's callback API orders (a reactor's calls and
# reactions, an interceptor's hooks) by common/grpc_handoffs.h;
# ignore_noninstrumented_modules=1 leaves out the allocations and copies
# the libraries make (read as writes unordered with ours); what else was
# read and found not ours is in scripts/tsan.supp. Left out under
# `thread`: the two tests that read google.protobuf.Struct maps
# (prometheus_metrics_test, dashboard_metrics_test), which crash in
# protobuf's map.h under gcc's TSan, as a program of a few lines does.
#
# Tests run several times slower; their ctest timeouts, and the deadlines
# the tests set themselves, are scaled by YARD_TEST_TIMEOUT_SCALE (3 for
# address, 6 for thread).
#
# Environment: SANITIZE_BUILD_DIR (build-asan / build-tsan), SANITIZE_JOBS
# (build and ctest parallelism, default nproc).
# Exit: 0 clean; 1 a test failed or a sanitizer reported; 2 bad arguments.
set -euo pipefail

cd "$(dirname "$0")/.."
kind=${1:-}
case $kind in
  address)
    flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
    build=${SANITIZE_BUILD_DIR:-build-asan}
    scale=3
    exclude="gpu"
    skip=()
    emulation=ON
    tsan=OFF
    ;;
  thread)
    flags="-fsanitize=thread"
    build=${SANITIZE_BUILD_DIR:-build-tsan}
    scale=6
    exclude="gpu" # no test has the label emulation in this build
    # They crash in protobuf's map.h under gcc's TSan (see above).
    skip=(-E "^(prometheus_metrics_test|dashboard_metrics_test)\$")
    emulation=OFF
    tsan=ON
    ;;
  *)
    echo "usage: scripts/run-sanitized-tests.sh address|thread [ctest args]" >&2
    exit 2
    ;;
esac
shift
jobs=${SANITIZE_JOBS:-$(nproc)}
# gcc's -Wmaybe-uninitialized misfires under the sanitizers (its manual says
# so), in libstdc++'s <regex> among others; -Werror would stop the build.
flags+=" -fno-omit-frame-pointer -Wno-maybe-uninitialized"

echo "run-sanitized-tests: configuring $build ($kind)"
cmake -S . -B "$build" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="$flags" \
  -DYARD_CUDA=OFF -DYARD_CUDA_EMULATION="$emulation" -DYARD_TSAN="$tsan" \
  -DYARD_TEST_TIMEOUT_SCALE="$scale" >/dev/null
cmake --build "$build" -j "$jobs"

reports="$PWD/$build/sanitizer-reports"
rm -rf "$reports"
mkdir -p "$reports"
# log_path: one file per process that reported (NAME.PID); the test's own
# output keeps its failure.
# handle_segv=0: tests kill a trainer with SIGSEGV on purpose (a crashed
# job beside a healthy one) and check that it died of signal 11; ASan's
# handler would report that and exit 1 instead. A real fault still kills
# the process by the signal, which the test that started it sees.
export ASAN_OPTIONS="log_path=$reports/asan:detect_leaks=1:handle_segv=0"
export UBSAN_OPTIONS="log_path=$reports/ubsan:print_stacktrace=1:halt_on_error=1"
export TSAN_OPTIONS="log_path=$reports/tsan:handle_segv=0:halt_on_error=0:second_deadlock_stack=1:ignore_noninstrumented_modules=1:suppressions=$PWD/scripts/tsan.supp"

status=0
(cd "$build" &&
  ctest --output-on-failure -j "$jobs" -LE "$exclude" "${skip[@]}" "$@") ||
  status=1

shopt -s nullglob
found=("$reports"/*)
if [[ ${#found[@]} -gt 0 ]]; then
  echo "run-sanitized-tests: ${#found[@]} sanitizer report(s) under $reports:" >&2
  for f in "${found[@]}"; do
    echo "== $f" >&2
    grep -E "^(SUMMARY|WARNING|ERROR)|runtime error" "$f" | head -5 >&2 || true
  done
  status=1
fi
if [[ $status -eq 0 ]]; then
  echo "run-sanitized-tests: $kind: every test passed, no sanitizer report"
fi
exit $status
