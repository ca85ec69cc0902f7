//! /readyz and STATUS= follow containerd going away and coming back. Alone in its binary: it
//! stops the shared containerd, and cargo runs test binaries one at a time.

mod support;

use std::time::Duration;

use apiserver_double::{ApiServer, ServerConfig};
use nix::sys::signal::Signal;
use serde_json::json;
use support::agent::AgentProcess;
use support::{endpoint, unique};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn readiness_follows_the_runtime_down_and_up_without_a_restart() {
    let server = ApiServer::start(ServerConfig::default()).await.unwrap();
    let node = unique("node");
    server
        .store()
        .create("nodes", json!({"metadata": {"name": node}}))
        .unwrap();
    let kubeconfig = tempfile::NamedTempFile::new().unwrap();
    server.write_kubeconfig(kubeconfig.path(), None).unwrap();
    let kubeconfig = kubeconfig.path().display().to_string();
    let cri = endpoint().to_string();
    let mut agent = AgentProcess::start(
        &[
            "--node-name",
            &node,
            "--kubeconfig",
            &kubeconfig,
            "--cri-endpoint",
            &cri,
        ],
        None,
    );
    agent.wait_notification(Duration::from_secs(10), |n| n == "READY=1");
    agent.wait_http("/readyz", 200, Duration::from_secs(20));

    support::containerd_script("stop-daemon");
    let body = agent.wait_http("/readyz", 503, Duration::from_secs(20));
    agent.wait_notification(Duration::from_secs(5), |n| {
        n.starts_with("STATUS=waiting: runtime")
    });
    assert_eq!(
        agent.get("/healthz").unwrap().0,
        200,
        "alive while the runtime is down"
    );
    support::containerd_script("start-daemon");
    assert!(body.contains("runtime: CRI runtime at"), "{body}");
    assert!(body.contains("unavailable"), "{body}");

    agent.wait_http("/readyz", 200, Duration::from_secs(30));
    agent.wait_notification(Duration::from_secs(5), |n| n.starts_with("STATUS=ready"));
    agent.signal(Signal::SIGTERM);
    assert!(agent.wait_exit(Duration::from_secs(10)).success());
}
