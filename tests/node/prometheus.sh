#!/usr/bin/env bash
# prometheus.sh — the real Prometheus server that tests/prometheus_e2e.rs starts on loopback to
# scrape the agent (Debian 12's package `prometheus`, 2.42).
#
#   prometheus.sh install  install the package when its binary is missing. Idempotent. The
#                          package's maintainer scripts would start a daemon of their own (sysv
#                          init script, or systemd where systemd is PID 1); none is left running.
#   prometheus.sh path     print the binary's path; exit 1 with a hint when it is not installed.
#
# The tests start their own prometheus process (temp config and TSDB, a free loopback port) and end
# it by PID; this script never starts one.
set -euo pipefail

BIN=/usr/bin/prometheus
# Where the package's init script (/etc/init.d/prometheus) writes the PID of the daemon it starts.
PACKAGED_PIDFILE=/run/prometheus/prometheus.pid

log() { printf '[prometheus.sh] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# Stops the daemon the package's maintainer scripts may have started — that one only, by its PID.
stop_packaged_daemon() {
  if [ -d /run/systemd/system ] && systemctl is-active --quiet prometheus.service 2>/dev/null; then
    log "stopping and disabling prometheus.service started by the package's postinst"
    systemctl disable --now --quiet prometheus.service
  fi
  [ -f "$PACKAGED_PIDFILE" ] || return 0
  local pid; pid=$(cat "$PACKAGED_PIDFILE")
  # Only a live process running the packaged binary: a stale pidfile may name anything.
  if [[ "$pid" =~ ^[0-9]+$ ]] && [ "$(readlink "/proc/$pid/exe" 2>/dev/null || true)" = "$BIN" ]; then
    log "stopping the packaged prometheus daemon (PID $pid) started by the package's postinst"
    kill "$pid"
    local i
    for i in $(seq 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && die "the packaged prometheus (PID $pid) did not stop"
  fi
  rm -f "$PACKAGED_PIDFILE"
}

install() {
  if [ -x "$BIN" ]; then
    return 0
  fi
  log "apt-get install prometheus"
  apt-get update -qq
  # RUNLEVEL=1 keeps invoke-rc.d from starting the package's init script (as in containerd.sh).
  DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 \
    apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  stop_packaged_daemon
  [ -x "$BIN" ] || die "the prometheus package did not install $BIN"
  log "installed: $("$BIN" --version 2>&1 | head -n 1)"
}

case "${1:-}" in
  install) install ;;
  path)
    [ -x "$BIN" ] || die "$BIN is missing: run tests/node/prometheus.sh install (as root)"
    echo "$BIN"
    ;;
  *) echo "usage: $0 install|path" >&2; exit 2 ;;
esac
