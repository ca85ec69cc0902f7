#!/usr/bin/env bash
# The README's "run" command: a local node sandbox on this machine and the agent against it.
# Today: a real containerd (tests/node/containerd.sh) and `inplaced runtime` against its socket.
# It grows with the project: API server double, kubelet stand-in, an in-place restart by CRR.
set -euo pipefail
cd "$(dirname "$0")/../.."

endpoint=$(tests/node/containerd.sh up)
cargo build --quiet --bin inplaced
echo
echo "== inplaced runtime --cri-endpoint $endpoint"
target/debug/inplaced runtime --cri-endpoint "$endpoint"
echo
echo "The sandbox's containerd keeps running. Stop it and remove everything it made with:"
echo "    tests/node/containerd.sh down"
