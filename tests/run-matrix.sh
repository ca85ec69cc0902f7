#!/usr/bin/env bash
# The end-to-end core on each containerd release: tests/run-matrix.sh [RELEASE...] (default: 1.6
# 1.7 2.1). For each release it brings up that containerd (tests/node/containerd.sh with
# INPLACED_CONTAINERD), runs the core tests against it and takes it down again; one containerd
# at a time. Before that, it checks that a config the release rejects is one clear error of
# tests/node/containerd.sh that leaves nothing running. The whole suite runs on the default
# release (tests/run-all.sh); this is what each other release must pass too. Ends with
# `matrix: N passed, M failed` (releases) and exits non-zero when one failed.
set -euo pipefail
cd "$(dirname "$0")/.."

releases=("$@")
[ ${#releases[@]} -gt 0 ] || releases=(1.6 1.7 2.1)

# The core, by test binary and test name (a name matches as a substring, as libtest filters do).
core_binaries=(cri_containerd cri_runtime_restart recreate_e2e containermeta_e2e resize_e2e
  restart_metrics_e2e recreate_runtime_restart agent_e2e fault_cri_e2e restart_request_e2e)
core_tests=(
  # The runtime API: version (`inplaced runtime`), listing, status with verbose info, exec, stop.
  version_reports_containerd_speaking_cri_v1
  container_events_stream_from_1_7_and_are_refused_by_1_6
  kubelet_style_pod_lists_back_with_its_labels_and_annotations
  container_status_reports_state_times_resources_and_verbose_info
  exec_sync_returns_output_and_exit_code
  stop_container_honours_sigterm_and_the_grace_timeout
  client_reconnects_after_containerd_restarts_and_retries_only_idempotent_calls
  # An event stream whose open waits for the first event does not hold up listing.
  an_event_stream_that_opens_with_its_first_event_does_not_hold_up_listing
  # ContainerRecreateRequests with preStop hooks of each kind.
  single_container_is_recreated_once_with_its_exec_pre_stop
  ordered_recreate_with_http_and_tcp_pre_stops_goes_one_container_at_a_time
  # ContainerRestartRequests (no OpenKruise): one pod through the CLI, and a rollout.
  one_container_is_restarted_in_place_by_the_cli
  a_rollout_of_ten_pods_keeps_at_most_three_unready
  # env-from-metadata restarts (OCI spec env, and the ExecSync fallback) and runtime-containers-meta.
  restart_trigger_with_an_annotation_and_a_label
  restart_trigger_works_in_an_image_without_env
  annotation_matches_kruise_and_golden_hashes_at_era_c
  # A cri resize, read back from the runtime.
  cri_actuator_grows_and_shrinks_a_two_container_pod
  # Restart timing from CRI timestamps.
  a_crr_restart_is_timed_from_cri_timestamps
  # containerd restarted at each point of a request.
  runtime_restarts_at_each_point_of_a_request_neither_fail_it_nor_kill_twice
  # The agent: discovery of the runtime, health and the node view.
  agent_notifies_systemd_serves_health_and_the_node_view
)

# Build once, before any runtime is up.
test_args=()
for b in "${core_binaries[@]}"; do test_args+=(--test "$b"); done
cargo test --locked "${test_args[@]}" --no-run

if tests/node/containerd.sh status >/dev/null 2>&1; then
  echo "run-matrix: a containerd of these tests is already up ($(tests/node/containerd.sh release)); run tests/node/containerd.sh down first" >&2
  exit 2
fi
trap 'tests/node/containerd.sh down >/dev/null 2>&1 || true' EXIT

passed=0
failed=0
failed_releases=()
# A config the runtime rejects must be one clear error of the script, leaving nothing running.
rejects_bad_config() {
  local release=$1 err
  err=$(INPLACED_CONTAINERD=$release INPLACED_TEST_CONTAINERD_EXTRA_CONFIG='[plugins\n  broken = ' \
    tests/node/containerd.sh up 2>&1 >/dev/null) && { echo "a broken config was accepted" >&2; return 1; }
  tests/node/containerd.sh status >/dev/null 2>&1 && { echo "a containerd runs after a broken config" >&2; return 1; }
  tests/node/containerd.sh down >/dev/null 2>&1 || true
  if ! grep -q 'ERROR: containerd exited' <<<"$err"; then
    echo "no clear error for a broken config: $err" >&2; return 1
  fi
  echo "=== containerd $release: a broken config is refused: $(grep 'ERROR' <<<"$err")" >&2
}

for release in "${releases[@]}"; do
  echo "=== containerd $release" >&2
  if ! rejects_bad_config "$release"; then
    failed=$((failed + 1)); failed_releases+=("$release")
    continue
  fi
  if ! INPLACED_CONTAINERD=$release tests/node/containerd.sh up >/dev/null; then
    echo "=== containerd $release: did not come up" >&2
    failed=$((failed + 1)); failed_releases+=("$release")
    continue
  fi
  INPLACED_TEST_CRI_ENDPOINT=$(tests/node/containerd.sh endpoint)
  export INPLACED_TEST_CRI_ENDPOINT
  if cargo test --locked "${test_args[@]}" -- --include-ignored "${core_tests[@]}"; then
    passed=$((passed + 1))
    echo "=== containerd $release: passed" >&2
  else
    failed=$((failed + 1)); failed_releases+=("$release")
    echo "=== containerd $release: FAILED" >&2
  fi
  tests/node/containerd.sh down >/dev/null
done

echo "matrix: $passed passed, $failed failed${failed_releases[*]:+ (${failed_releases[*]})}"
[ "$failed" = 0 ]
