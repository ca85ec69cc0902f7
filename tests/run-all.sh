#!/usr/bin/env bash
# The whole test suite, as the README says and CI runs it: brings up the real containerd the tests
# talk to (installing it and Prometheus from Debian when missing), runs every test of the workspace,
# and tears the runtime down again when this script started it. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."

started_here=0
if ! tests/node/containerd.sh status >/dev/null 2>&1; then
  tests/node/containerd.sh up >/dev/null
  started_here=1
fi
cleanup() { if [ "$started_here" = 1 ]; then tests/node/containerd.sh down; fi; }
trap cleanup EXIT
# The Prometheus server that tests/prometheus_e2e.rs scrapes the agent with (installed when missing).
tests/node/prometheus.sh install

INPLACED_TEST_CRI_ENDPOINT=$(tests/node/containerd.sh endpoint)
export INPLACED_TEST_CRI_ENDPOINT
cargo test --workspace --locked "$@"
