//! CRI faults while the agent recreates containers, on the sandbox with real containerd (issue
//! 12). Seeded and repeatable: `INPLACED_FAULT_SEED` picks the seed (printed either way),
//! `INPLACED_FAULT_CYCLES` the number of cycles (default 24).
//!
//! Each cycle makes the CRI fault proxy in front of the agent damage one kind of call, then asks
//! for a recreate of every pod at once: listings that are garbage, empty
//! or hung past the agent's deadline; a StopContainer refused before the runtime sees it, failed
//! after the runtime did it, or slow; ContainerStatus answers that are garbage; sandbox listings
//! that are empty or garbage. The kubelet stand-in talks to containerd directly and is not hit.
//! Invariants: every request ends Succeeded; no container but the targeted ones ever got a
//! StopContainer; every targeted container was stopped by the runtime exactly once (the proxy
//! counts the calls it forwarded), whatever the agent saw; the agent never exits.

mod support;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use node_sandbox::criproxy::{Fault, FaultRule, RuleId};
use rand::RngExt;
use rand::rngs::StdRng;
use support::sandbox::{Node, NodeOptions};
use tonic::Code;

const PODS: usize = 3;
const LONG: Duration = Duration::from_secs(120);

/// One seeded fault rule; returns its method, what it was (for the failure messages) and its ID.
fn inject(node: &Node, rng: &mut StdRng) -> (&'static str, String, RuleId) {
    let n = rng.random_range(1..5);
    let (method, fault, times) = match rng.random_range(0..8) {
        0 => ("ListContainers", Fault::Malformed, n),
        1 => ("ListContainers", Fault::Empty, n),
        // Past the agent's 10 s call deadline: the refresh fails and is tried again.
        2 => ("ListContainers", Fault::Hang(Duration::from_secs(12)), 1),
        3 => ("StopContainer", Fault::error(Code::Unavailable), 1),
        4 => ("StopContainer", Fault::error_after(Code::Unavailable), 1),
        5 => ("StopContainer", Fault::Hang(Duration::from_secs(2)), PODS),
        6 => ("ContainerStatus", Fault::Malformed, n),
        _ => (
            "ListPodSandbox",
            if rng.random_bool(0.5) {
                Fault::Empty
            } else {
                Fault::Malformed
            },
            n,
        ),
    };
    let skip = if method == "StopContainer" {
        0
    } else {
        rng.random_range(0..3)
    };
    let description = format!("{method} {fault:?} x{times} after {skip}");
    let id = node
        .proxy
        .add(FaultRule::new(method, fault).times(times).skip(skip));
    (method, description, id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn cri_faults_kill_nothing_wrongly_and_lose_no_request() {
    let (seed, cycles, mut rng) = support::chaos::seeded_run(24);

    // The same pods are restarted every cycle: a kubelet whose crash back-off is capped at 1 s.
    let mut node =
        Node::start_with(NodeOptions::kubelet("v1.35.7").crash_loop_cap(Duration::from_secs(1)))
            .await;
    let pods = node.run_quick_stopping_pods("crifault", PODS).await;
    let mut targeted = HashSet::new();
    // Per faulted method: (cycles, faulted calls).
    let mut fired: HashMap<&str, (usize, usize)> = HashMap::new();
    for cycle in 0..cycles {
        // Armed before the requests exist: the agent kills within milliseconds of a request,
        // so a fault armed later misses the kills. Other calls' faults skip a few calls first.
        let (method, fault, rule) = inject(&node, &mut rng);
        let requests = node.recreate_app_of_each(&pods, LONG).await;
        targeted.extend(requests.iter().map(|(_, old)| old.clone()));
        let context = format!("cycle {cycle} (seed {seed}, {fault})");
        println!("{context}: {requests:?}");
        for (crr, old) in &requests {
            let done = node.wait_completed(crr, LONG).await;
            assert_eq!(
                support::sandbox::container_phase(&done, "app"),
                "Succeeded",
                "{context}: {done:#}"
            );
            assert_eq!(
                node.proxy.stops_forwarded(old),
                1,
                "{context}: the runtime stopped {old} of {crr} more than once or never"
            );
        }
        let entry = fired.entry(method).or_default();
        entry.0 += 1;
        entry.1 += node.proxy.fired(rule);
        node.proxy.clear();
        assert!(
            node.agent().exit_status().is_none(),
            "{context}: the agent exited: {:?}",
            node.agent().exit_status()
        );
    }
    println!("faulted calls per method (cycles, calls): {fired:?}");
    // Faults that never met a call would make this test prove nothing.
    for (method, (cycles, calls)) in &fired {
        assert!(*calls > 0, "{method}: {cycles} cycles, no call was faulted");
    }
    // No StopContainer call ever named a container that no request targeted.
    for (id, count) in node.proxy.stop_counts() {
        assert!(
            targeted.contains(&id),
            "{id} got {count} StopContainer calls but was never targeted"
        );
    }
    node.agent()
        .wait_http("/readyz", 200, Duration::from_secs(30));
    node.stop().await;
}

/// containerd 1.7+ sends `GetContainerEvents`' answer headers with the first event, so on a quiet
/// node opening the stream waits. The proxy holds the open the same way; the agent must go on
/// listing the runtime meanwhile, open the stream once, and not count the wait as a failed call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn an_event_stream_that_opens_with_its_first_event_does_not_hold_up_listing() {
    let mut node = Node::start().await;
    drop(node.agent.take());
    node.proxy.add(FaultRule::new(
        "GetContainerEvents",
        Fault::Hang(Duration::from_secs(120)),
    ));
    node.proxy.reset_counters();
    node.start_agent();
    let metric = |node: &mut Node, series: &str| -> f64 {
        let (_, text) = node.agent().get("/metrics").unwrap();
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or(0.0)
    };
    let refreshes = "inplaced_node_view_refreshes_total{result=\"success\"}";
    let before = metric(&mut node, refreshes);
    // Longer than the agent's 10 s call deadline, which the open used to run into.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let listed = metric(&mut node, refreshes) - before;
    // At 300 ms, backing off to 2.4 s on a quiet node: at least five listings in 12 s.
    assert!(listed >= 5.0, "{listed} listings in 12 s");
    assert_eq!(
        node.proxy.calls("GetContainerEvents"),
        1,
        "opened once, still waiting"
    );
    assert_eq!(
        metric(
            &mut node,
            "inplaced_cri_request_duration_seconds_count{method=\"GetContainerEvents\",code=\"DeadlineExceeded\"}"
        ),
        0.0
    );
    node.stop().await;
}
