#!/bin/bash
# Runs inside the VM that tests/vm/run.sh boots (systemd 252 as PID 1, cgroup v2, containerd
# with the systemd cgroup driver); never on the host. It checks, in order:
#   the node       PID 1, cgroup v2, containerd with SystemdCgroup = true, the test images;
#   the package    `dpkg -i` of the fresh .deb: enabled and started, READY=1 under Type=notify,
#                  its STATUS= text, the admin socket; a ContainerRecreateRequest, a `cri`
#                  resize and a ContainerRestartRequest (through the kubectl-inplaced plugin)
#                  carried out by the installed agent under the shipped hardening (CRI socket,
#                  kill journals, cgroup writes on the pod slice and container scope);
#   systemd        the watchdog holds while healthy and fires on a hung agent, and on an agent
#                  whose worker hangs (the tests' build, test-only fault switch), SIGKILL → restart,
#                  a bad config → exit 2 and no restart loop, `systemctl stop` finishes a kill
#                  under way, `systemd-analyze security` (saved), `dpkg --purge`;
#   end to end     the Rust end-to-end tests named below, against this node's containerd with the
#                  kubelet stand-in's systemd driver (pod slices, cri-containerd scopes): on
#                  Debian 12's containerd 1.6, then, with containerd.service switched to Debian
#                  sid's 2.1 (config version 3) by a drop-in, a part of them again.
# Prints ok:/FAIL: lines and ends with `vm: N passed, M failed`; /mnt/out/result holds "N M".
set -uo pipefail
# Under pipefail a `producer | grep -q` fails when grep stops reading before the producer is done
# (SIGPIPE): a pipe into grep reads to the end (`grep PATTERN >/dev/null`).
REPO=${INPLACED_REPO:?set by the VM entry}
OUT=/mnt/out
CRI=unix:///run/containerd/containerd.sock
# Not under /root: the unit's ProtectHome=yes hides it from the agent (docs/install.md).
KUBECONFIG_FILE=/etc/kubernetes/sandbox.kubeconfig
SANDBOX=$REPO/target/debug/node-sandbox
T0=$(date +%s)

passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok: $*"; }
fail() { failed=$((failed + 1)); echo "FAIL: $*"; }
expect_eq() { if [ "$2" = "$3" ]; then ok "$1"; else fail "$1: expected [$3], got [$2]"; fi; }
finish() {
  echo "vm: $passed passed, $failed failed"
  echo "$passed $failed" > "$OUT/result"
}
trap finish EXIT
step() { printf '\n== [%4ds] %s\n' "$(( $(date +%s) - T0 ))" "$*"; }
# wait_until SECONDS COMMAND...: polls every 0.5 s; false when the time runs out.
wait_until() {
  local deadline=$(( $(date +%s) + $1 )); shift
  until "$@"; do [ "$(date +%s)" -lt "$deadline" ] || return 1; sleep 0.5; done
}
unit() { systemctl show -p "$2" --value "$1"; }
active() { [ "$(unit "$1" ActiveState)" = active ]; }

# --------------------------------------------------------------------------------- the node
step "the node"
expect_eq "PID 1" "$(cat /proc/1/comm)" systemd
expect_eq "cgroup filesystem" "$(stat -fc %T /sys/fs/cgroup)" cgroup2fs
wait_until 60 active containerd.service && ok "containerd.service is active" || fail "containerd.service is not active"
if grep -q 'SystemdCgroup = true' /etc/containerd/config.toml; then ok "containerd uses the systemd cgroup driver"; else fail "SystemdCgroup is not set"; fi
images=$(INPLACED_TEST_CRI_BASE=/run/vm-images "$REPO/tests/node/containerd.sh" images)
if ctr -n k8s.io images import "$images" >/dev/null && ctr -n k8s.io images ls -q | grep -x localhost/pause:local >/dev/null; then
  ok "test images imported"
else
  fail "test images import"
fi

# The sandbox (API server double, Node, kubelet stand-in with the systemd driver) as a unit of
# its own, as a kubelet would run; the agent's kubeconfig points at it through a drop-in, which
# is how a platform team configures a packaged unit.
step "the node sandbox"
trap 'journalctl -u node-sandbox --no-pager > "$OUT/node-sandbox.journal" 2>&1; finish' EXIT
mkdir -p /etc/kubernetes
systemd-run --unit=node-sandbox --quiet \
  -E INPLACED_TEST_CGROUP_DRIVER=systemd -E NODE_SANDBOX_LOG=info \
  "$SANDBOX" run --kubeconfig-out "$KUBECONFIG_FILE" --node-name inplaced-vm \
  --cri-endpoint "$CRI" --kubelet-version v1.31.12 --no-resize-gate
wait_until 60 test -s "$KUBECONFIG_FILE" && ok "node sandbox up" || { fail "node sandbox did not write its kubeconfig"; journalctl -u node-sandbox --no-pager | tail -20; exit 1; }
mkdir -p /etc/systemd/system/inplaced.service.d
printf '[Service]\nEnvironment=KUBECONFIG=%s\n' "$KUBECONFIG_FILE" > /etc/systemd/system/inplaced.service.d/vm.conf
sb() { "$SANDBOX" "$@" --kubeconfig "$KUBECONFIG_FILE"; }

# ------------------------------------------------------------------------------ the package
step "dpkg -i"
deb=$(ls "$REPO"/target/packages/inplaced_*_amd64.deb)
dpkg -i "$deb" >/dev/null && ok "dpkg -i $(basename "$deb")" || fail "dpkg -i"
expect_eq "unit enabled by the package" "$(systemctl is-enabled inplaced)" enabled
# Type=notify: the start job ends, and the unit is active, only once READY=1 came.
wait_until 60 active inplaced && ok "active: READY=1 received (Type=$(unit inplaced Type))" || fail "inplaced did not become active"
expect_eq "Type" "$(unit inplaced Type)" notify
status_text=$(unit inplaced StatusText)
[ -n "$status_text" ] && ok "STATUS= text: $status_text" || fail "no STATUS= text"
systemctl status inplaced --no-pager 2>&1 | grep "Status: \"" >/dev/null && ok "systemctl status shows the status text" || fail "systemctl status shows no Status line"
expect_eq "watchdog interval" "$(unit inplaced WatchdogUSec)" 30s

step "a ContainerRecreateRequest through the installed agent"
# create-pod prints "pod default/NAME created (uid UID)", wait-pod "  main containerd://ID ...".
uid=$(sb create-pod --name demo --node-name inplaced-vm | sed -n 's/.*(uid \(.*\))$/\1/p')
if sb wait-pod --name demo --timeout 120s > /tmp/demo.txt; then ok "pod demo runs"; else fail "pod demo does not run"; fi
container_id() { grep -o 'containerd://[0-9a-f]*' "$1" | head -1 | cut -d/ -f3; }
slice=kubepods-burstable-pod${uid//-/_}.slice
slice_dir=/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/$slice
[ -d "$slice_dir" ] && ok "pod slice $slice" || fail "no pod slice at $slice_dir"
old_id=$(container_id /tmp/demo.txt)
[ -d "$slice_dir/cri-containerd-$old_id.scope" ] && ok "container scope cri-containerd-<id>.scope" || fail "no scope cri-containerd-$old_id.scope in $slice_dir ($(ls "$slice_dir"))"
sb create-crr --name demo-crr --pod demo --container main >/dev/null
if sb wait-crr --name demo-crr --timeout 120s > /tmp/crr.json; then ok "CRR Completed"; else fail "CRR did not complete: $(cat /tmp/crr.json)"; fi
grep -q '"Succeeded"' /tmp/crr.json && ok "CRR container state Succeeded" || fail "CRR container state: $(cat /tmp/crr.json)"
ls /var/lib/inplaced | grep . >/dev/null && ok "kill journal in /var/lib/inplaced ($(ls /var/lib/inplaced | tr '\n' ' '))" || fail "nothing in /var/lib/inplaced"
if inplaced pods > /tmp/pods.txt 2>&1 && grep -q demo /tmp/pods.txt; then ok "inplaced pods (admin socket)"; else fail "inplaced pods: $(cat /tmp/pods.txt)"; fi

step "a cri resize through the installed agent"
sb wait-pod --name demo --timeout 60s > /tmp/demo.txt
id=$(container_id /tmp/demo.txt)
[ "$id" != "$old_id" ] && ok "the CRR replaced the container" || fail "same container ID after the CRR"
scope_dir=$slice_dir/cri-containerd-$id.scope
# Before: requests 100m/32Mi, limits 500m/64Mi (shares 102 → weight 4; quota 50000).
expect_eq "pod slice cpu.max before" "$(cat "$slice_dir/cpu.max")" "50000 100000"
expect_eq "pod slice memory.max before" "$(cat "$slice_dir/memory.max")" $((64 << 20))
if KUBECONFIG=$KUBECONFIG_FILE inplaced resize demo -c main --cpu-limit 700m --memory-limit 96Mi --cpu-request 200m --timeout 3m > /tmp/resize.txt 2>&1; then
  ok "inplaced resize: $(tail -1 /tmp/resize.txt)"
else
  fail "inplaced resize: $(cat /tmp/resize.txt)"
fi
grep -q "cri" /tmp/resize.txt && ok "resized through CRI" || fail "not the cri actuator: $(cat /tmp/resize.txt)"
# shares 204 → weight 1 + 202*9999/262142 = 8 (runc's conversion).
expect_eq "pod slice cpu.max" "$(cat "$slice_dir/cpu.max")" "70000 100000"
expect_eq "pod slice cpu.weight" "$(cat "$slice_dir/cpu.weight")" 8
expect_eq "pod slice memory.max" "$(cat "$slice_dir/memory.max")" $((96 << 20))
expect_eq "scope cpu.max" "$(cat "$scope_dir/cpu.max")" "70000 100000"
expect_eq "scope cpu.weight" "$(cat "$scope_dir/cpu.weight")" 8
expect_eq "scope memory.max" "$(cat "$scope_dir/memory.max")" $((96 << 20))
expect_eq "scope memory.swap.max" "$(cat "$scope_dir/memory.swap.max" 2>&1)" 0
echo "pod slice memory.swap.max: $(cat "$slice_dir/memory.swap.max" 2>&1)"
# systemd owns the slice: its unit holds the new values (set through D-Bus as kubelet's
# libcontainer does), so a daemon-reload, which re-applies them to the cgroup, keeps the resize.
expect_eq "pod slice unit MemoryMax" "$(unit "$slice" MemoryMax)" $((96 << 20))
expect_eq "pod slice unit CPUQuotaPerSecUSec" "$(unit "$slice" CPUQuotaPerSecUSec)" 700ms
expect_eq "pod slice unit CPUWeight" "$(unit "$slice" CPUWeight)" 8
systemctl daemon-reload
expect_eq "pod slice cpu.max after daemon-reload" "$(cat "$slice_dir/cpu.max")" "70000 100000"
expect_eq "pod slice memory.max after daemon-reload" "$(cat "$slice_dir/memory.max")" $((96 << 20))
expect_eq "pod slice cpu.weight after daemon-reload" "$(cat "$slice_dir/cpu.weight")" 8

step "a ContainerRestartRequest through the installed agent and the kubectl plugin"
before=$(container_id /tmp/demo.txt)
if KUBECONFIG=$KUBECONFIG_FILE kubectl-inplaced restart demo -c main --wait --timeout 3m > /tmp/restart.txt 2>&1; then
  ok "kubectl-inplaced restart: $(grep -c . /tmp/restart.txt) lines, $(grep -o 'Succeeded' /tmp/restart.txt | head -1)"
else
  fail "kubectl-inplaced restart: $(cat /tmp/restart.txt)"
fi
sb wait-pod --name demo --timeout 60s > /tmp/demo.txt
after=$(container_id /tmp/demo.txt)
[ -n "$after" ] && [ "$after" != "$before" ] && ok "the restart request replaced the container" || fail "same container after the restart request ($before)"
[ -d "$slice_dir/cri-containerd-$after.scope" ] && ok "in the same pod slice" || fail "no scope for $after in $slice_dir"
[ -s /var/lib/inplaced/restart-request-kills.jsonl ] && ok "its kill journal in /var/lib/inplaced" || fail "no restart-request-kills.jsonl in /var/lib/inplaced ($(ls /var/lib/inplaced | tr '\n' ' '))"

# ---------------------------------------------------------------------------------- systemd
step "the watchdog"
pid=$(unit inplaced MainPID)
mkdir -p /etc/systemd/system/inplaced.service.d
printf '[Service]\nWatchdogSec=4s\n' > /etc/systemd/system/inplaced.service.d/watchdog.conf
systemctl daemon-reload && systemctl restart inplaced
pid=$(unit inplaced MainPID); restarts=$(unit inplaced NRestarts)
sleep 14
expect_eq "watchdog (4 s) holds for 14 s: same PID" "$(unit inplaced MainPID)" "$pid"
expect_eq "watchdog holds: no restart" "$(unit inplaced NRestarts)" "$restarts"
# Counter-check: a hung agent (SIGSTOP) is killed by the watchdog and restarted.
kill -STOP "$pid"
if wait_until 30 bash -c "[ \"\$(systemctl show -p NRestarts --value inplaced)\" -gt $restarts ]"; then
  ok "a hung agent is killed by the watchdog and restarted"
else
  fail "the watchdog did not fire on a stopped agent"
fi
journalctl -u inplaced --no-pager | grep "Watchdog timeout" >/dev/null && ok "journal: Watchdog timeout" || fail "no watchdog timeout in the journal"
rm /etc/systemd/system/inplaced.service.d/watchdog.conf

# A worker that hangs while the main loop goes on: the tests' build of the agent (its test-only
# fault switch makes the recreate loop await forever once it has a request) as a transient
# notify unit with a 4 s watchdog, the installed agent stopped meanwhile. Its /healthz fails
# after stuck-worker-after (3 s) plus the loop's 1 s, the pings stop, systemd kills and restarts it.
step "a hung worker under systemd (test-only fault switch)"
systemctl stop inplaced
systemd-run --unit=inplaced-hang --quiet -p Type=notify -p WatchdogSec=4s -p Restart=on-watchdog \
  -p RestartSec=1s -E INPLACED_TEST_HANG_WORKER=recreate -E KUBECONFIG="$KUBECONFIG_FILE" \
  "$REPO/target/debug/inplaced" agent --node-name inplaced-vm --cri-endpoint "$CRI" \
  --state-dir /var/lib/inplaced-hang --admin-socket /run/inplaced-hang/admin.sock \
  --listen-address 127.0.0.1:10299 --stuck-worker-after 3s
wait_until 60 active inplaced-hang && ok "the tests' build runs as a notify unit" || fail "inplaced-hang did not become active"
sb create-crr --name hang-crr --pod demo --container main >/dev/null
if wait_until 90 bash -c '[ "$(systemctl show -p NRestarts --value inplaced-hang)" -gt 0 ]'; then
  ok "a hung worker: the watchdog fired and systemd restarted the agent"
else
  fail "a hung worker: no watchdog restart in 90 s"
fi
journalctl -u inplaced-hang --no-pager > "$OUT/inplaced-hang.journal" 2>&1
grep "Watchdog timeout" "$OUT/inplaced-hang.journal" >/dev/null && ok "journal: Watchdog timeout of the hung agent" || fail "no watchdog timeout in the hung agent's journal"
grep "a worker is stuck; not pinging the watchdog" "$OUT/inplaced-hang.journal" >/dev/null && ok "journal: the agent named the stuck worker" || fail "the hung agent did not say a worker was stuck"
systemctl stop inplaced-hang
systemctl daemon-reload && systemctl restart inplaced
wait_until 60 active inplaced || fail "inplaced not active again after the watchdog test"

step "SIGKILL"
pid=$(unit inplaced MainPID); restarts=$(unit inplaced NRestarts)
kill -KILL "$pid"
if wait_until 30 bash -c "[ \"\$(systemctl show -p NRestarts --value inplaced)\" -gt $restarts ] && [ \"\$(systemctl show -p ActiveState --value inplaced)\" = active ]"; then
  ok "SIGKILL: restarted by systemd (RestartSec=5s), new PID $(unit inplaced MainPID)"
else
  fail "not restarted after SIGKILL"
fi

step "a bad config"
cp /etc/inplaced/config.toml /root/config.toml.orig
echo 'no-such-setting = 1' >> /etc/inplaced/config.toml
systemctl restart inplaced 2>/dev/null && fail "a bad config started" || ok "systemctl restart with a bad config fails"
# A start by hand resets the restart counter: count from here.
restarts=$(unit inplaced NRestarts)
sleep 8
expect_eq "exit status" "$(unit inplaced ExecMainStatus)" 2
expect_eq "state after 8 s (RestartPreventExitStatus=2)" "$(unit inplaced ActiveState)" failed
expect_eq "no restart loop" "$(unit inplaced NRestarts)" "$restarts"
journalctl -u inplaced --no-pager | grep "no-such-setting" >/dev/null && ok "the journal names the bad setting" || fail "the journal does not name the bad setting"
cp /root/config.toml.orig /etc/inplaced/config.toml
systemctl reset-failed inplaced; systemctl start inplaced
wait_until 60 active inplaced && ok "starts again with the config put back" || fail "does not start again"

step "systemctl stop during a kill"
# A container that ignores SIGTERM: its stop takes the pod's grace period (10 s).
sb create-pod --name stubborn --node-name inplaced-vm --script "trap '' TERM; while true; do sleep 1; done" >/dev/null
sb wait-pod --name stubborn --timeout 120s > /tmp/stubborn.txt || fail "pod stubborn does not run"
sid=$(container_id /tmp/stubborn.txt)
sb create-crr --name stubborn-crr --pod stubborn --container main >/dev/null
# The agent logs the kill as it sends StopContainer; the container then takes 10 s to stop.
if wait_until 60 bash -c 'journalctl -u inplaced --no-pager | grep -q "stopping container for ContainerRecreateRequest crr=stubborn-crr\|crr=stubborn-crr.*stopping container"'; then
  ok "the agent is stopping the stubborn container"
else
  fail "the agent did not start the kill"
fi
sleep 1
started=$(date +%s)
systemctl stop inplaced
took=$(( $(date +%s) - started ))
[ "$took" -ge 4 ] && ok "systemctl stop waited for the kill under way (${took}s)" || fail "systemctl stop returned after ${took}s: the kill was not waited for"
state=$(ctr -n k8s.io tasks ls 2>/dev/null | awk -v id="$sid" '$1 == id {print $3}')
[ "$state" != RUNNING ] && ok "the old container was stopped (task: ${state:-gone})" || fail "the old container still runs after systemctl stop"
expect_eq "the unit stopped cleanly" "$(unit inplaced Result)" success
systemctl start inplaced
if sb wait-crr --name stubborn-crr --timeout 120s > /tmp/crr2.json; then ok "the CRR completes after the restart"; else fail "the CRR did not complete after the restart: $(cat /tmp/crr2.json)"; fi

step "systemd-analyze security"
systemd-analyze security inplaced --no-pager > "$OUT/security.txt" 2>&1
exposure=$(grep -o 'Overall exposure level for inplaced.service: .*' "$OUT/security.txt")
[ -n "$exposure" ] && ok "$exposure" || fail "systemd-analyze security: $(tail -3 "$OUT/security.txt")"
journalctl -u inplaced --no-pager > "$OUT/inplaced.journal" 2>&1
# The hardening blocked nothing the agent did: no EPERM/EACCES/read-only errors in its journal.
if grep -Ei 'permission denied|operation not permitted|read-only file system|AccessDenied' "$OUT/inplaced.journal" > /tmp/denied; then
  fail "the hardening blocked something: $(head -3 /tmp/denied)"
else
  ok "no permission error in the agent's journal"
fi

step "dpkg --purge"
dpkg --purge inplaced >/dev/null && ok "dpkg --purge" || fail "dpkg --purge"
expect_eq "no inplaced process" "$(pgrep -x inplaced || true)" ""
expect_eq "unit gone" "$(unit inplaced LoadState)" not-found
for p in /usr/bin/inplaced /etc/inplaced /var/lib/inplaced /run/inplaced /etc/default/inplaced \
  /etc/systemd/system/multi-user.target.wants/inplaced.service; do
  [ ! -e "$p" ] && ok "$p removed" || fail "$p is still there"
done
rm -rf /etc/systemd/system/inplaced.service.d
systemctl stop node-sandbox
wait_until 30 bash -c '! ls -d /sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod*.slice 2>/dev/null | grep -q .' \
  && ok "the sandbox's pod slices are gone" || fail "pod slices left: $(ls /sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/)"

# ------------------------------------------------------------------- end to end, systemd driver
# run_e2e LABEL: the tests named on stdin ("<test binary name> <test>" per line, from the
# binaries run.sh listed), each alone, against this node's containerd with the systemd driver.
run_e2e() {
  local label=$1 binary test path
  while read -r binary test; do
    path=$(awk -v b="$binary" '$1 == b {print $2}' "$OUT/test-binaries")
    [ -x "$path" ] || { fail "$binary: no test binary"; continue; }
    if INPLACED_TEST_CRI_ENDPOINT=$CRI INPLACED_TEST_CGROUP_DRIVER=systemd \
      "$path" --ignored --exact "$test" --test-threads=1 > "$OUT/$label-$test.log" 2>&1; then
      ok "$label $binary::$test"
    else
      fail "$label $binary::$test (log: target/vm/$label-$test.log)"; tail -30 "$OUT/$label-$test.log"
    fi
  done
}

step "end-to-end tests with the systemd cgroup driver, containerd 1.6"
run_e2e containerd-1.6 <<'TESTS'
resize_e2e cri_actuator_grows_and_shrinks_a_two_container_pod
resize_e2e a_resize_refused_midway_is_undone
resize_e2e cri_resize_counts_a_sidecar_in_the_pod_cgroup
recreate_e2e single_container_is_recreated_once_with_its_exec_pre_stop
restart_request_e2e ordered_restart_stops_each_container_after_the_one_before_is_ready
containermeta_e2e restart_trigger_with_an_annotation_and_a_label
TESTS

# containerd.service switched to Debian sid's 2.1 (config version 3, the systemd driver) with a
# drop-in, as a platform team upgrading the runtime of a node would; its own root and state.
step "containerd 2.1 (config version 3) under containerd.service"
systemctl stop containerd
mkdir -p /etc/systemd/system/containerd.service.d
printf '[Service]\nEnvironment=PATH=/opt/containerd-2.1/bin:/usr/sbin:/usr/bin:/sbin:/bin\nExecStart=\nExecStart=/opt/containerd-2.1/bin/containerd --config /etc/containerd/config-2.1.toml\n' \
  > /etc/systemd/system/containerd.service.d/containerd-2.1.conf
systemctl daemon-reload
systemctl start containerd
ctr21() { /opt/containerd-2.1/bin/ctr "$@"; }
server_version() { ctr21 version 2>/dev/null | awk '/^Server:/{s=1} s && /Version:/{print $2; exit}'; }
if wait_until 60 active containerd.service && wait_until 30 bash -c '/opt/containerd-2.1/bin/ctr version >/dev/null 2>&1'; then
  v=$(server_version)
  case "$v" in 2.1.*) ok "containerd $v runs under containerd.service" ;; *) fail "containerd.service runs containerd [$v], not 2.1" ;; esac
else
  fail "containerd 2.1 did not start: $(journalctl -u containerd --no-pager | tail -5)"
fi
if ctr21 -n k8s.io images import "$images" >/dev/null && ctr21 -n k8s.io images ls -q | grep -x localhost/pause:local >/dev/null; then
  ok "test images imported into containerd 2.1"
else
  fail "test images import into containerd 2.1"
fi
step "end-to-end tests with the systemd cgroup driver, containerd 2.1"
run_e2e containerd-2.1 <<'TESTS'
resize_e2e cri_actuator_grows_and_shrinks_a_two_container_pod
recreate_e2e single_container_is_recreated_once_with_its_exec_pre_stop
restart_request_e2e ordered_restart_stops_each_container_after_the_one_before_is_ready
containermeta_e2e restart_trigger_with_an_annotation_and_a_label
TESTS
