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
use support::sandbox::Node;

const PODS: usize = 4;
const LONG: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkilled_agent_never_kills_twice_and_loses_no_request() {
    let (seed, cycles, mut rng) = support::chaos::seeded_run(50);

    let mut node = Node::start().await;
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
        node.assert_each_recreated_once(&requests, LONG, &context)
            .await;
    }
    // Nothing but the targeted containers was ever stopped, each once.
    node.assert_only_targeted_stopped_once(&targeted);
    node.stop().await;
}
