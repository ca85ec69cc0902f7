//! CRR reaction latency against real containerd (issue 7's benchmark): from the moment a
//! ContainerRecreateRequest exists in the API server to the agent's StopContainer arriving at
//! the CRI proxy, and to the request's completion; plus how many API requests the agent made
//! between the creation and the kill. Needs `tests/node/containerd.sh up`.
//!
//!     cargo bench -p inplaced --bench crr_latency [-- REQUESTS PODS]

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::measure::summary;
use support::sandbox::{AGENT_USER, NS, Node, container_id};
use support::unique;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = support::measure::numeric_args();
    let requests = args.first().copied().unwrap_or(40) as usize;
    let pods = args.get(1).copied().unwrap_or(4) as usize;
    let node = Node::start().await;
    // Every write the agent makes to the API is held 200 ms by the API server: a kill that
    // waited for any of them would take at least that long.
    let delay = Duration::from_millis(200);
    for verb in ["create", "update", "patch"] {
        node.server.faults().add(
            apiserver_double::Fault::delay(delay).on(apiserver_double::RequestMatch::any()
                .user(AGENT_USER)
                .verb(verb)),
        );
    }
    let names = node.run_quick_stopping_pods("bench", pods).await;
    let (mut to_kill, mut to_done, mut round_trips) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..requests {
        let pod_name = &names[i % pods];
        let pod = node
            .wait_pod(
                pod_name,
                Duration::from_secs(60),
                support::sandbox::all_running,
            )
            .await;
        let old = container_id(&pod, "app");
        // The webhook's mutation, then straight into the store: the clock starts when the
        // object exists, with no client in between.
        let mut crr = json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "ContainerRecreateRequest",
            "metadata": {"name": unique("crr"), "namespace": NS},
            "spec": {"podName": pod_name, "containers": [{"name": "app"}],
                     "strategy": {"terminationGracePeriodSeconds": 5}}});
        node_sandbox::manager::webhook_mutate(&mut crr, &pod).unwrap();
        let name = crr["metadata"]["name"].as_str().unwrap().to_string();
        let audit_before = node.server.audit().entries().len();
        let created = Instant::now();
        node.server
            .store()
            .create("containerrecreaterequests", crr)
            .unwrap();
        while node.proxy.stop_count(&old) == 0 {
            assert!(
                created.elapsed() < Duration::from_secs(30),
                "no kill for {name}"
            );
            tokio::time::sleep(Duration::from_micros(500)).await;
        }
        to_kill.push(created.elapsed().as_secs_f64() * 1e3);
        let agent_requests = node.server.audit().entries()[audit_before..]
            .iter()
            .filter(|e| e.request.user == AGENT_USER)
            .count();
        round_trips.push(agent_requests);
        node.wait_completed(&name, Duration::from_secs(60)).await;
        to_done.push(created.elapsed().as_secs_f64() * 1e3);
    }
    println!(
        "{requests} CRRs over {pods} pods, kubelet stand-in restart delay 500 ms, every agent API write delayed {} ms",
        delay.as_millis()
    );
    println!(
        "created -> StopContainer at the runtime: {}",
        summary(to_kill)
    );
    println!("created -> Completed: {}", summary(to_done));
    println!(
        "agent API requests sent between creation and kill (none awaited by it): max {} (all: {:?})",
        round_trips.iter().max().unwrap_or(&0),
        round_trips
    );
    node.stop().await;
}
