//! The agent SIGKILLed at random points while it recreates containers, cycle after cycle, on the
//! sandbox with real containerd (issue 12). Seeded and repeatable: `INPLACED_FAULT_SEED` picks
//! the seed (printed either way), `INPLACED_FAULT_CYCLES` the number of cycles (default 50).
//!
//! Each cycle asks for a recreate of every pod at once, kills the agent after a random delay
//! (before, during or after the kills), restarts it, and waits for every request to complete.
//! Invariants: every request ends Succeeded, every targeted container got exactly one
//! StopContainer from the agent (the CRI proxy counts them), no other container got any.

mod support;

use std::collections::HashMap;
use std::time::Duration;

use nix::sys::signal::Signal;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::json;
use support::sandbox::{Node, all_running, container_id, container_phase};
use support::unique;

const PODS: usize = 4;
const LONG: Duration = Duration::from_secs(90);

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkilled_agent_never_kills_twice_and_loses_no_request() {
    let seed = env_number("INPLACED_FAULT_SEED").unwrap_or(20261124);
    let cycles = env_number("INPLACED_FAULT_CYCLES").unwrap_or(50) as usize;
    println!("fault seed {seed}, {cycles} cycles (INPLACED_FAULT_SEED / INPLACED_FAULT_CYCLES)");
    let mut rng = StdRng::seed_from_u64(seed);

    let mut node = Node::start().await;
    let mut pods = Vec::new();
    for _ in 0..PODS {
        let name = unique("chaos");
        node.run_pod(
            &name,
            json!({"containers": [{"name": "app", "image": "localhost/busybox:local",
                "command": ["/bin/sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.1; done"]}]}),
        )
        .await;
        pods.push(name);
    }
    let mut targeted: HashMap<String, String> = HashMap::new();
    for cycle in 0..cycles {
        // Every pod running again after the last cycle's restarts.
        let mut requests = Vec::new();
        for pod_name in &pods {
            let pod = node.wait_pod(pod_name, LONG, all_running).await;
            let old = container_id(&pod, "app");
            let crr = unique("crr");
            node.create_crr(
                &crr,
                pod_name,
                &["app"],
                json!({"terminationGracePeriodSeconds": 5}),
            )
            .await;
            targeted.insert(old.clone(), crr.clone());
            requests.push((crr, old));
        }
        // Before the watch event, between journal and kill, during the stop, or after.
        let delay = Duration::from_millis(rng.random_range(0..400));
        tokio::time::sleep(delay).await;
        node.agent().signal(Signal::SIGKILL);
        node.agent().wait_exit(Duration::from_secs(10));
        node.start_agent();
        for (crr, old) in &requests {
            let done = node.wait_completed(crr, LONG).await;
            assert_eq!(
                container_phase(&done, "app"),
                "Succeeded",
                "cycle {cycle} (seed {seed}, killed after {delay:?}): {done:#}"
            );
            assert_eq!(
                node.proxy.stop_count(old),
                1,
                "cycle {cycle} (seed {seed}, killed after {delay:?}): {old} of {crr}"
            );
        }
    }
    // Nothing but the targeted containers was ever stopped, each once.
    let stops = node.proxy.stop_counts();
    for (id, count) in &stops {
        assert!(
            targeted.contains_key(id),
            "{id} was stopped but never targeted"
        );
        assert_eq!(*count, 1, "{id} stopped {count} times");
    }
    assert_eq!(stops.len(), cycles * PODS);
    node.stop().await;
}
