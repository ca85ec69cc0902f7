#!/usr/bin/env bash
# The whole test suite, as the README says and CI runs it: brings up the real containerd the tests
# talk to (installing it and Prometheus from Debian when missing), runs every test of the workspace
# (those that plain `cargo test` reports as ignored, needing root and the runtime, included), and
# tears the runtime down again when this script started it. Exits non-zero on any failure.
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
mkdir -p target
# Tests that need root and the test containerd are #[ignore]d, so that plain `cargo test` runs the
# rest anywhere; here the runtime is up and every test runs (`--include-ignored`): a missing
# runtime fails them, nothing is skipped. Arguments for the test binaries after a `--` of the
# caller's get `--include-ignored` added to them (one `--` only), unless they already choose
# `--ignored` or `--include-ignored` themselves.
separator=0
chosen=0
for arg in "$@"; do
  if [ "$separator" = 1 ]; then
    case "$arg" in --ignored | --include-ignored) chosen=1 ;; esac
  elif [ "$arg" = -- ]; then
    separator=1
  fi
done
if [ $# -eq 0 ]; then
  # The whole suite: every test binary built first, then run by tests/run-suite.py as cargo
  # would run them, except that the ten-minute back-off test runs beside the others (and the
  # binaries that stop containerd after it), which keeps it off the suite's critical path.
  cargo test --workspace --locked --no-run --message-format=json-render-diagnostics \
    > target/test-binaries.json
  # The real tier's Kubernetes components (cached: nothing to do after the first build on a
  # machine; waits for a build already under way, such as CI's background job).
  build_started=$(date +%s)
  tests/kube/build.sh
  echo "run-all: the real Kubernetes components ready after $(( $(date +%s) - build_started )) s"
  python3 tests/run-suite.py < target/test-binaries.json
elif [ "$chosen" = 1 ]; then
  cargo test --workspace --locked "$@"
elif [ "$separator" = 1 ]; then
  cargo test --workspace --locked "$@" --include-ignored
else
  cargo test --workspace --locked "$@" -- --include-ignored
fi
