#!/usr/bin/env bash
# The README's first set-up command (the main job): a local node sandbox on this machine and the agent against it.
#
#   tests/node/demo.sh         bring up containerd (tests/node/containerd.sh), build, start the
#                              sandbox (API server double + Node + kubelet and kruise-manager
#                              stand-ins) and `inplaced agent` in the background, create a demo
#                              pod, restart its container in place through a ContainerRecreateRequest,
#                              print the result, `inplaced pods` and the agent's restart metrics.
#   tests/node/demo.sh stop    end the processes this script started (by PID) and take
#                              containerd down again (containerd.sh down) if this script brought it up.
#
# State (PID files, logs, kubeconfig, admin socket) lives in $DEMO_DIR (default /run/inplaced-demo).
set -euo pipefail
cd "$(dirname "$0")/../.."

DIR=${DEMO_DIR:-/run/inplaced-demo}
NODE=${DEMO_NODE:-demo-node}
API=${DEMO_API_LISTEN:-127.0.0.1:16443}
METRICS=${DEMO_METRICS_LISTEN:-127.0.0.1:10231}
CRR_TIMEOUT=${DEMO_CRR_TIMEOUT:-30s}

log() { printf '[demo] %s\n' "$*" >&2; }

stop_pid() {
  local file=$1 pid
  [ -f "$file" ] || return 0
  pid=$(cat "$file")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then log "pid $pid did not stop on SIGTERM: SIGKILL"; kill -KILL "$pid"; fi
  fi
  rm -f "$file"
}

stop() {
  stop_pid "$DIR/agent.pid"
  # SIGTERM makes node-sandbox remove the sandboxes and cgroups of its pods.
  stop_pid "$DIR/sandbox.pid"
  # Like tests/run-all.sh: containerd goes down only when this script brought it up.
  if [ -f "$DIR/containerd.started" ]; then tests/node/containerd.sh down; fi
  rm -rf "$DIR"
  log "stopped"
}

if [ "${1:-}" = stop ]; then stop; exit 0; fi
[ "$(id -u)" = 0 ] || { log "must run as root"; exit 1; }
# A second run starts afresh.
if [ -f "$DIR/agent.pid" ] || [ -f "$DIR/sandbox.pid" ]; then
  stop_pid "$DIR/agent.pid"; stop_pid "$DIR/sandbox.pid"
fi
mkdir -p "$DIR"

if ! tests/node/containerd.sh status >/dev/null 2>&1; then touch "$DIR/containerd.started"; fi
endpoint=$(tests/node/containerd.sh up)
log "building inplaced and node-sandbox"
cargo build --quiet --bin inplaced -p inplaced
cargo build --quiet --bin node-sandbox -p node-sandbox
BIN=target/debug

KC=$DIR/kubeconfig
rm -f "$KC"
setsid "$BIN/node-sandbox" run --listen "$API" --kubeconfig-out "$KC" --node-name "$NODE" \
  --cri-endpoint "$endpoint" >"$DIR/sandbox.log" 2>&1 </dev/null &
echo $! >"$DIR/sandbox.pid"
for _ in $(seq 1 100); do [ -s "$KC" ] && break; sleep 0.1; done
[ -s "$KC" ] || { cat "$DIR/sandbox.log" >&2; log "node-sandbox did not come up"; exit 1; }
cat "$DIR/sandbox.log"

AGENT_ARGS=(--node-name "$NODE" --kubeconfig "$KC" --cri-endpoint "$endpoint"
            --admin-socket "$DIR/admin.sock" --state-dir "$DIR/state")
setsid "$BIN/inplaced" agent "${AGENT_ARGS[@]}" --listen-address "$METRICS" \
  >"$DIR/agent.log" 2>&1 </dev/null &
echo $! >"$DIR/agent.pid"
log "inplaced agent started (pid $(cat "$DIR/agent.pid")), metrics on http://$METRICS/metrics"

echo
echo "== creating pod default/demo on node $NODE"
"$BIN/node-sandbox" create-pod --kubeconfig "$KC" --name demo --node-name "$NODE"
"$BIN/node-sandbox" wait-pod --kubeconfig "$KC" --name demo --timeout 60s
for _ in $(seq 1 50); do [ -S "$DIR/admin.sock" ] && break; sleep 0.2; done

echo
echo "== in-place restart of container main through a ContainerRecreateRequest"
"$BIN/node-sandbox" create-crr --kubeconfig "$KC" --name demo-restart --pod demo --container main
if "$BIN/node-sandbox" wait-crr --kubeconfig "$KC" --name demo-restart --timeout "$CRR_TIMEOUT"; then
  "$BIN/node-sandbox" wait-pod --kubeconfig "$KC" --name demo --timeout 30s
else
  echo "   (the agent did not complete the request within $CRR_TIMEOUT: this build may not handle CRRs yet)"
fi

echo
echo "== inplaced pods"
"$BIN/inplaced" pods "${AGENT_ARGS[@]}" || true

echo
echo "== the agent's restart metrics (http://$METRICS/metrics)"
metrics=$(exec 3<>"/dev/tcp/${METRICS%:*}/${METRICS#*:}" && printf 'GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3 && cat <&3 || true)
printf '%s\n' "$metrics" | grep -E '^inplaced_[a-z_]*(restart|recreate)' | grep -v '_bucket{' || echo "   (no restart metrics exported yet)"

echo
echo "Everything keeps running: API server double http://$API (kubeconfig $KC),"
echo "agent pid $(cat "$DIR/agent.pid") (log $DIR/agent.log), sandbox pid $(cat "$DIR/sandbox.pid") (log $DIR/sandbox.log)."
echo "Stop it all and remove what it made with:"
echo "    tests/node/demo.sh stop"
