#!/usr/bin/env bash
# Makes the test-only Python environment: .venv (gitignored) on Debian's
# python3 with its site packages (python3-torch from install-deps.sh), plus
# `transformers` from PyPI, which Debian lacks, to check that a GPT export
# loads in Hugging Face and gives our logits. Idempotent. If PyPI cannot be
# reached, it says so and the tests that need transformers check less
# (torch alone) rather than fail.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=/usr/bin/python3
VENV=.venv
TRANSFORMERS_VERSION=4.36.2

if [ -x "$VENV/bin/python" ] &&
   "$VENV/bin/python" -c "import torch, transformers" 2>/dev/null; then
  exit 0
fi
if ! "$PY" -c "import torch" 2>/dev/null; then
  echo "setup-test-venv: $PY cannot import torch (python3-torch missing?);" \
       "PyTorch checks will skip" >&2
  exit 0
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv --system-site-packages "$VENV"
echo "setup-test-venv: installing transformers==$TRANSFORMERS_VERSION into $VENV" >&2
if ! "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
       "transformers==$TRANSFORMERS_VERSION"; then
  echo "setup-test-venv: could not install transformers; the export check" \
       "will run without it" >&2
fi
