#!/usr/bin/env bash
# Installs Trainyard's build and test dependencies from Debian 12 packages.
# Idempotent: does nothing when every package is already installed.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev prometheus-cpp-dev libsqlite3-dev
  libgtest-dev libgmock-dev libbenchmark-dev zlib1g-dev libyaml-cpp-dev
  # Token hashing and randomness; the openssl CLI makes test certificates.
  libssl-dev openssl
  # Fuzz targets: libFuzzer comes with clang.
  clang
  # Observability tests: a real Prometheus scrapes the daemons, promtool
  # lints their /metrics and the alert rules; curl fetches over HTTP.
  prometheus curl
  # Engine tests: the GPT is checked against PyTorch (CPU) on the same
  # weights; the venv made by setup-test-venv.sh adds transformers.
  python3-torch python3-venv
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
