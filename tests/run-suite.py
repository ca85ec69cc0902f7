#!/usr/bin/env python3
"""Runs the whole built test suite the way `cargo test --workspace -- --include-ignored` would,
binary by binary, except that the longest test runs beside the others instead of after them.

tests/run-all.sh calls this (without arguments of the caller's) after building every test
binary; it reads the artifacts from `cargo test --no-run --message-format=json` on stdin.

- LONG tests (each waits out real kubelet time, ten minutes for the back-off reset) start first,
  in the background, each in its own process; so do whole binaries that mostly wait on real
  time and leave the runtime alone (a test name of None).
- Then every other binary runs, one after the other, as cargo runs them (their own tests two at
  a time), the LONG tests skipped where they live.
- Binaries that must have the shared containerd to themselves (SERIAL) run last, after the LONG
  tests have finished.
- Then the doc tests (`cargo test --doc`).

Each binary runs in its package's directory, as under cargo, and prints its own
`test result:` line; at the end one line per binary with its time, then
`suite: N passed, M failed` (binaries) and the exit status is non-zero when any failed.
"""

import json
import os
import re
import subprocess
import sys
import threading
import time

# (binary, test name): tests that take minutes of real time and use the runtime like any other;
# (binary, None): a whole binary that mostly waits on real time (certificate and token expiry,
# the agents' Leases).
LONG = [
    ("backoff_e2e", "after_ten_minutes_of_running_the_back_off_starts_over_as_predicted"),
    ("credentials_e2e", None),
    # Waits out the agents' Lease (40 s) for a node without an agent.
    ("rollout_e2e", None),
]
# LONG entries that start this many seconds late: rollout_e2e runs three nodes' worth of
# stand-ins and agents, and its load makes sub-second timings late: the ten-minute test's first
# rounds (in its first 20 s) and backoff_e2e's. backoff_e2e runs early in the sequence and takes
# about 110 s, so rollout_e2e starts after it; it still ends long before the ten-minute test. The
# real tier (real_kube_e2e) runs in the sequence like any binary.
START_LATE = {"rollout_e2e": 150}
# Binaries that must have the shared containerd to themselves: those whose tests stop and start
# it (tests/support: containerd_script), and cri_listing, which counts its listings and expects
# no other container to appear meanwhile (docs/testing.md, "Running tests side by side").
SERIAL = ["agent_runtime_outage", "cri_runtime_restart", "recreate_runtime_restart", "cri_listing"]


def artifacts(lines):
    """(name, executable, package directory) of every test executable cargo built."""
    found = []
    for line in lines:
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            continue
        if message.get("reason") != "compiler-artifact" or not message.get("executable"):
            continue
        if not message.get("profile", {}).get("test"):
            continue
        target = message["target"]
        name = target["name"]
        if "lib" in target["kind"] or "bin" in target["kind"]:
            name = f"{name} ({target['kind'][0]})"
        directory = os.path.dirname(message["manifest_path"])
        found.append((name, message["executable"], directory))
    return found


RESULT = re.compile(r"^test result: \w+\. (\d+) passed; (\d+) failed")


def counted(command, cwd, out):
    """Runs `command`, copying its output to `out` line by line; returns its exit code and
    the tests its `test result:` lines count as passed and failed."""
    passed = failed = 0
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, errors="replace")
    for line in process.stdout:
        out.write(line)
        out.flush()
        match = RESULT.match(line)
        if match:
            passed += int(match.group(1))
            failed += int(match.group(2))
    return process.wait(), passed, failed


def run(name, executable, directory, extra, out=sys.stdout):
    started = time.monotonic()
    out.write(f"\n     Running {name} ({executable})\n")
    code, passed, failed = counted([executable, "--include-ignored", *extra], directory, out)
    return code, time.monotonic() - started, passed, failed


def main():
    binaries = artifacts(sys.stdin)
    if not binaries:
        print("run-suite: no test binaries on stdin", file=sys.stderr)
        return 2
    results = []
    by_name = {name: (exe, d) for name, exe, d in binaries}
    long_runs = []

    for binary, test in LONG:
        if binary not in by_name:
            print(f"run-suite: {binary} was not built", file=sys.stderr)
            return 2
        exe, directory = by_name[binary]
        log_path = os.path.join("target", f"long-{test or binary}.log")
        log = open(log_path, "w")
        outcome = {}
        label = f"{binary}::{test}" if test else binary
        filters = ["--exact", test] if test else []

        def background(exe=exe, directory=directory, label=label, filters=filters, log=log,
                       outcome=outcome, late=START_LATE.get(binary, 0)):
            time.sleep(late)
            outcome["result"] = run(f"{label} (in the background)", exe, directory, filters, log)
            log.close()

        thread = threading.Thread(target=background)
        thread.start()
        long_runs.append((label, log_path, thread, outcome))

    missing = [name for name in SERIAL if name not in by_name]
    if missing:
        print(f"run-suite: SERIAL names binaries that were not built: {missing}", file=sys.stderr)
        return 2

    skips = {}
    whole = {binary for binary, test in LONG if test is None}
    for binary, test in LONG:
        if test:
            skips.setdefault(binary, []).extend(["--skip", test])
    for name, exe, directory in binaries:
        if name in SERIAL or name in whole:
            continue
        results.append((name, *run(name, exe, directory, skips.get(name, []))))

    for name, log_path, thread, outcome in long_runs:
        thread.join()
        print(f"\n     Output of {name}, which ran in the background:", flush=True)
        with open(log_path) as log:
            sys.stdout.write(log.read())
        results.append((name, *outcome.get("result", (1, 0.0, 0, 0))))

    for name, exe, directory in binaries:
        if name in SERIAL:
            results.append((name, *run(name, exe, directory, [])))

    started = time.monotonic()
    code, passed, failed = counted(["cargo", "test", "--workspace", "--locked", "--doc"], None,
                                   sys.stdout)
    results.append(("doc tests", code, time.monotonic() - started, passed, failed))

    print("\nsuite: time per binary (s), longest first")
    for name, code, took, passed, failed in sorted(results, key=lambda r: -r[2]):
        state = "ok  " if code == 0 else "FAIL"
        print(f"  {took:7.1f}  {state}  {passed:3d} passed  {name}")
    broken = [r[0] for r in results if r[1] != 0]
    for name in broken:
        print(f"  failed: {name}")
    passed = sum(r[3] for r in results)
    failed = sum(r[4] for r in results)
    # A binary that failed without a result line (it crashed) still counts as a failure.
    failed = max(failed, len(broken))
    print(f"suite: {passed} passed, {failed} failed")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
