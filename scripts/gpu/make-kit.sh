#!/usr/bin/env bash
# Packs what a lent GPU machine needs into .gpu-kit/ (ignored by git; the
# device tool carries it, packed as kit.tar.gz that run-on-device.sh
# unpacks): the gpu-labelled test binaries, yard-train, yard-server,
# yard-worker, yard, gpt_train_bench, attention_bench and gemm_bench, each
# with the Debian libraries it links (gRPC, protobuf, Abseil, ...) beside
# it. CUDA, cuBLAS and NCCL are left out: the device has them
# (shared/tools/bundle-libs.sh).
# The scripts, the PyTorch peer and the shakespeare data are tracked files
# and travel with the working tree.
#
#   scripts/gpu/make-kit.sh [--no-build]     run here, not on the device
#
# --no-build takes build/ as it is. Prints the kit's size and what the
# device call would carry in all; the device tool refuses more than 64 MiB.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${BUILD_DIR:-$root/build}"
kit="$root/.gpu-kit"
bundle="$root/shared/tools/bundle-libs.sh"
[[ -x "$bundle" ]] || bundle=/work/shared/tools/bundle-libs.sh
die() { echo "make-kit: $*" >&2; exit 1; }

grep -q '^YARD_CUDA:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null ||
  die "$build is not configured with YARD_CUDA=ON"
# The gpu tests as ctest knows them: "  Test #38: device_query_test".
mapfile -t tests < <(cd "$build" && ctest -L gpu -N | sed -n 's/^ *Test *#[0-9]*: *//p')
((${#tests[@]} > 0)) || die "ctest -L gpu lists no tests in $build"
programs=(yard-train yard-server yard-worker yard gpt_train_bench attention_bench
  gemm_bench)
if [[ "${1:-}" != "--no-build" ]]; then
  cmake --build "$build" -j2 --target "${programs[@]}" "${tests[@]}"
fi

binaries=()
for p in "${programs[@]}"; do binaries+=("$build/bin/$p"); done
for t in "${tests[@]}"; do
  f="$(find "$build" -name "$t" -type f -perm -u+x | head -n 1)"
  [[ -n "$f" ]] || die "no executable for test $t under $build"
  binaries+=("$f")
done
for b in "${binaries[@]}"; do [[ -x "$b" ]] || die "$b missing; build it"; done

rm -rf "$kit"
"$bundle" "$kit" "${binaries[@]}" >/dev/null
# Symbols are most of the size; the device needs none of them.
strip --strip-unneeded "$kit"/bin/* "$kit"/lib/* 2>/dev/null || true
printf '%s\n' "${tests[@]}" >"$kit/gpu-tests.txt"
{
  echo "made $(date -u +%Y-%m-%dT%H:%MZ) from $(git -C "$root" rev-parse --short HEAD 2>/dev/null)$(git -C "$root" diff --quiet 2>/dev/null || echo '+local changes')"
  echo "build: $build ($(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$build/CMakeCache.txt"), CUDA arch $(sed -n 's/^YARD_CUDA_ARCHITECTURES:STRING=//p' "$build/CMakeCache.txt"))"
  echo "left to the device (not packed):"
  for b in "$kit"/bin/*; do ldd "$b" | awk '/libcu|libnccl|libnvidia/ {print "  " $1}'; done | sort -u
} >"$kit/MANIFEST"

# Packed for the journey (about 2.7x smaller); run-on-device.sh unpacks it.
tar -C "$kit" -czf "$kit/kit.tar.gz" bin lib
rm -rf "$kit/bin" "$kit/lib"

kit_bytes=$(du -sb "$kit" | cut -f1)
# What travels: tracked and untracked-not-ignored files, plus the kit.
tree_bytes=$(cd "$root" && git ls-files -z --cached --others --exclude-standard |
  xargs -0 du -cb 2>/dev/null | awk 'END {print $1}')
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
echo "kit: $kit (${#binaries[@]} programs and their libraries, packed): $(mib "$kit_bytes")"
echo "working tree: $(mib "$tree_bytes"); carried in all: $(mib $((kit_bytes + tree_bytes))) of 64 MiB"
((kit_bytes + tree_bytes < 64 * 1048576)) || die "over the device tool's 64 MiB limit"
