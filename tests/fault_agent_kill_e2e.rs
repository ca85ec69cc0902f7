//! The agent SIGKILLed at random points while it recreates containers, cycle after cycle, on the
//! sandbox with real containerd (issue 12). Seeded and repeatable: `INPLACED_FAULT_SEED` picks
//! the seed (printed either way), `INPLACED_FAULT_CYCLES` the number of cycles (default 50).
//!
//! Each cycle asks for a recreate of every pod at once, kills the agent after a random delay
//! (before, during or after the kills), restarts it, and waits for every request to complete.
//! Invariants: every request ends Succeeded, every targeted container got exactly one
//! StopContainer from the agent (the CRI proxy counts them), no other container got any.

mod support;

use std::collections::HashSet;
use std::time::Duration;

use nix::sys::signal::Signal;
use rand::RngExt;
use support::sandbox::{Node, NodeOptions};

const PODS: usize = 4;
const LONG: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn sigkilled_agent_never_kills_twice_and_loses_no_request() {
    let (seed, cycles, mut rng) = support::chaos::seeded_run(50);

    // Each pod is restarted every cycle: a kubelet whose crash back-off is capped at 1 s (a
    // real kubelet's default would make the fifth cycle wait 80 s, the seventh 5 min).
    let mut node =
        Node::start_with(NodeOptions::kubelet("v1.35.7").crash_loop_cap(Duration::from_secs(1)))
            .await;
    let pods = node.run_quick_stopping_pods("chaos", PODS).await;
    let mut targeted = HashSet::new();
    for cycle in 0..cycles {
        // Every pod running again after the last cycle's restarts.
        let requests = node.recreate_app_of_each(&pods, LONG).await;
        targeted.extend(requests.iter().map(|(_, old)| old.clone()));
        // Before the watch event, between journal and kill, during the stop, or after.
        let delay = Duration::from_millis(rng.random_range(0..400));
        tokio::time::sleep(delay).await;
        node.agent().signal(Signal::SIGKILL);
        node.agent().wait_exit(Duration::from_secs(10));
        node.start_agent();
        let context = format!("cycle {cycle} (seed {seed}, killed after {delay:?})");
        for (crr, old) in &requests {
            let done = node.wait_completed(crr, LONG).await;
            assert_eq!(
                support::sandbox::container_phase(&done, "app"),
                "Succeeded",
                "{context}: {done:#}"
            );
            // One StopContainer — or two when the agent was killed after sending the first and
            // before the runtime acted on it (the call dies with its client; the container still
            // runs), and the restarted agent resumed that very kill from its journal (docs/recreate.md,
            // "At most one kill per container per request"). Never a third, never another
            // container.
            let stops = node.proxy.stop_count(old);
            let resumed = node
                .agent()
                .log()
                .lines()
                .any(|l| l.contains(old.as_str()) && l.contains("resumed=true"));
            assert!(
                stops == 1 || (stops == 2 && resumed),
                "{context}: {old} of {crr} got {stops} StopContainer calls (resumed: {resumed})"
            );
        }
    }
    // Nothing but the targeted containers was ever stopped.
    for (id, count) in node.proxy.stop_counts() {
        assert!(
            targeted.contains(&id),
            "{id} got {count} StopContainer calls but was never targeted"
        );
        assert!(count <= 2, "{id} got {count} StopContainer calls");
    }
    node.stop().await;
}
