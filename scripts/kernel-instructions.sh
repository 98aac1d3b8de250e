#!/usr/bin/env bash
# Static instruction counts of a CUDA file's kernels for sm_90a, on a machine
# without a GPU, cuobjdump or nvdisasm: compiles FILE to a cubin with the
# build's include flags and -O3, and prints each kernel's machine-code size
# (its .text section) in instructions (16 bytes each on sm_90a), with the
# kernel's demangled name. A count is not a time: it says what the compiler
# emitted, e.g. whether a change removed instructions from a loop body.
#
#   scripts/kernel-instructions.sh FILE.cu [BUILD_DIR]    (default build/)
#
# Exit codes: 0 counted; 1 the file does not compile; 2 bad usage.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
usage() { echo "usage: $0 FILE.cu [BUILD_DIR]" >&2; exit 2; }
[[ $# -ge 1 && $# -le 2 ]] || usage
file="$(realpath -e "$1" 2>/dev/null)" || { echo "kernel-instructions: no file $1" >&2; exit 2; }
build="$(realpath -m "${2:-$root/build}")"
nvcc="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
[[ -x "$nvcc" ]] || { echo "kernel-instructions: no nvcc" >&2; exit 2; }
rsp="$build/engine/cuda/CMakeFiles/yard_engine_cuda.dir/includes_CUDA.rsp"
includes=(-I"$root")
# The build's include list names the generated and dependency headers too.
[[ -f "$rsp" ]] && includes=(--options-file "$rsp")
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$build/engine/cuda" 2>/dev/null || cd "$root"
  "$nvcc" "${includes[@]}" -O3 -DNDEBUG -arch=sm_90a -DTRAINYARD_SM90A=1 -std=c++17 -cubin \
    "$file" -o "$tmp/k.cubin") || exit 1
readelf -S -W "$tmp/k.cubin" 2>/dev/null |
  sed -n 's/^ *\[ *[0-9]*\] \.text\.\([^ ]*\) .*PROGBITS *[0-9a-f]* *[0-9a-f]* *\([0-9a-f]*\) .*/\2 \1/p' |
  while read -r size name; do
    printf '%7d  %s\n' $((16#$size / 16)) "$(c++filt "$name")"
  done | sort -k2
