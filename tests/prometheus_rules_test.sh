#!/bin/sh
# The alerting rules and the Prometheus configuration in deploy/prometheus:
# `promtool check rules`, `promtool test rules` (alerts_test.yml) and
# `promtool check config`. Exits 77 (ctest: skipped) without promtool.
set -eu
dir="$1/deploy/prometheus"
if ! command -v promtool >/dev/null 2>&1; then
  echo "SKIPPED: promtool is not installed (scripts/install-deps.sh installs the prometheus package)"
  exit 77
fi
promtool check rules "$dir/alerts.yml"
promtool test rules "$dir/alerts_test.yml"
promtool check config "$dir/prometheus.yml"
