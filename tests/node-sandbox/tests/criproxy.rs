//! The CRI fault proxy in front of the real containerd: forwarding, faults, counters.

mod common;

use std::time::Duration;

use common::*;
use inplaced::cri::{CriClient, CriConfig, CriEndpoint, CriError};
use node_sandbox::criproxy::{CriProxy, Fault, FaultRule};
use node_sandbox::util::{test_cri_endpoint, unique_name};
use serde_json::json;
use tonic::Code;

fn client_for(proxy: &CriProxy, call_timeout: Duration) -> CriClient {
    let mut config = CriConfig::new(CriEndpoint::parse(&proxy.endpoint()).unwrap());
    config.call_timeout = call_timeout;
    config.max_attempts = 1;
    CriClient::new(config)
}

fn tempdir(prefix: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(unique_name(prefix));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn forwards_and_counts_and_injects_errors() {
    let dir = tempdir("criproxy");
    let proxy = CriProxy::start(&dir, &test_cri_endpoint()).await.unwrap();
    let client = client_for(&proxy, Duration::from_secs(5));
    let info = client.version().await.unwrap();
    assert_eq!(info.runtime_name, "containerd");
    assert!(client.image_status(TEST_IMAGE).await.unwrap().is_some());
    assert_eq!(proxy.calls("Version"), 1);
    assert_eq!(proxy.calls("ImageStatus"), 1);

    let rule = proxy.add(FaultRule::new("ListContainers", Fault::error(Code::Internal)).once());
    let err = client.list_containers(None).await.unwrap_err();
    assert_eq!(err.code(), Code::Internal, "{err}");
    client.list_containers(None).await.unwrap();
    assert_eq!(proxy.fired(rule), 1);
    assert_eq!(proxy.calls("ListContainers"), 2);

    // skip(1).times(2): the first call passes, the next two fail, then it is spent.
    let rule = proxy.add(
        FaultRule::new("Status", Fault::error(Code::Unknown))
            .skip(1)
            .times(2),
    );
    assert!(client.status(false).await.is_ok());
    assert!(client.status(false).await.is_err());
    assert!(client.status(false).await.is_err());
    assert!(client.status(false).await.is_ok());
    assert_eq!(proxy.fired(rule), 2);

    // A hang longer than the caller's deadline is a timeout for the caller.
    let short = client_for(&proxy, Duration::from_millis(300));
    proxy.add(FaultRule::new("Version", Fault::Hang(Duration::from_secs(2))).once());
    let err = short.version().await.unwrap_err();
    assert!(matches!(err, CriError::Timeout { .. }), "{err}");
    // The version answer, damaged: not CRI v1 any more.
    proxy.add(FaultRule::new("Version", Fault::Malformed).once());
    let err = client.version().await.unwrap_err();
    assert!(matches!(err, CriError::NotCriV1 { .. }), "{err}");
    proxy.clear();
    client.version().await.unwrap();
    drop(proxy);
    assert!(!dir.join("cri-proxy.sock").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn counts_stop_container_per_container_and_damages_answers() {
    let dir = tempdir("criproxy");
    let proxy = CriProxy::start(&dir, &test_cri_endpoint()).await.unwrap();
    // The kubelet stand-in talks to containerd directly: its own calls (every sync) would
    // otherwise race this test for the once-only rules.
    let env = Env::start_with(|c| {
        c.restart_delay = Duration::from_secs(60);
    })
    .await;
    let name = unique_name("proxy");
    env.create_pod(
        &name,
        json!({"containers": [
            {"name": "a", "image": TEST_IMAGE, "command": ["/bin/sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.1; done"]},
            {"name": "b", "image": TEST_IMAGE, "command": ["/bin/sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.1; done"]}
        ]}),
    );
    let pod = env
        .wait_pod(&name, Duration::from_secs(30), all_running)
        .await;
    let a = status_of(&pod, "a")["containerID"]
        .as_str()
        .unwrap()
        .to_owned();
    let b = status_of(&pod, "b")["containerID"]
        .as_str()
        .unwrap()
        .to_owned();
    let a_id = a.strip_prefix("containerd://").unwrap();
    let b_id = b.strip_prefix("containerd://").unwrap();
    let client = client_for(&proxy, Duration::from_secs(5));

    // ContainerStatus: empty (no status) and malformed (garbage labels, invalid state).
    let rule = proxy.add(
        FaultRule::new("ContainerStatus", Fault::Empty)
            .for_container(&a)
            .once(),
    );
    assert!(
        client
            .container_status(b_id, false)
            .await
            .unwrap()
            .status
            .is_some()
    );
    assert!(
        client
            .container_status(a_id, false)
            .await
            .unwrap()
            .status
            .is_none()
    );
    assert_eq!(proxy.fired(rule), 1);
    proxy.add(
        FaultRule::new("ContainerStatus", Fault::Malformed)
            .for_container(a_id)
            .once(),
    );
    let status = client
        .container_status(a_id, false)
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(status.state, 99);
    assert!(status.metadata.is_none());
    assert_eq!(
        status.annotations["io.kubernetes.container.hash"],
        "not-hex!"
    );

    // An error before forwarding: counted, but the runtime never saw it.
    proxy.add(
        FaultRule::new("StopContainer", Fault::error(Code::Unavailable))
            .for_container(a_id)
            .once(),
    );
    assert!(
        client
            .stop_container(a_id, Duration::from_secs(2))
            .await
            .is_err()
    );
    assert_eq!(proxy.stop_count(&a), 1);
    assert_eq!(proxy.stops_forwarded(&a), 0);
    let st = client
        .container_status(a_id, false)
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(
        st.state,
        inplaced::cri::proto::ContainerState::ContainerRunning as i32
    );

    // An error after forwarding: the container is stopped although the caller saw a failure.
    proxy.add(FaultRule::new("StopContainer", Fault::error_after(Code::DeadlineExceeded)).once());
    assert!(
        client
            .stop_container(a_id, Duration::from_secs(2))
            .await
            .is_err()
    );
    assert_eq!(proxy.stop_count(a_id), 2);
    assert_eq!(proxy.stops_forwarded(a_id), 1);
    let st = client
        .container_status(a_id, false)
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(
        st.state,
        inplaced::cri::proto::ContainerState::ContainerExited as i32
    );

    // A late answer: done at once, answered after the delay.
    proxy.add(
        FaultRule::new(
            "StopContainer",
            Fault::HangAfter(Duration::from_millis(800)),
        )
        .once(),
    );
    let started = std::time::Instant::now();
    client
        .stop_container(b_id, Duration::from_secs(2))
        .await
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(800));
    assert_eq!(proxy.stop_count(b_id), 1);
    assert_eq!(proxy.stop_counts().len(), 2);
    env.stop().await;
    drop(proxy);
    let _ = std::fs::remove_dir_all(&dir);
}

/// What `Version` answers tells a socket that is not a CRI v1 runtime (Unimplemented: no such
/// service) from a runtime that is starting (containerd's CRI plugin answers `Unknown: server
/// is not initialized yet` until it has recovered its state): only the first is `NotCriV1`,
/// which makes discovery pass the socket over.
#[tokio::test]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn a_starting_runtime_is_not_taken_for_a_non_cri_socket() {
    let dir = tempdir("criproxy-version");
    let proxy = CriProxy::start(&dir, &test_cri_endpoint()).await.unwrap();
    let client = client_for(&proxy, Duration::from_secs(5));
    proxy.add(
        FaultRule::new(
            "Version",
            Fault::Error {
                code: Code::Unknown,
                message: "server is not initialized yet".into(),
            },
        )
        .once(),
    );
    let err = client.version().await.unwrap_err();
    assert!(!matches!(err, CriError::NotCriV1 { .. }), "{err}");
    assert_eq!(err.code(), Code::Unknown, "{err}");
    proxy.add(FaultRule::new("Version", Fault::error(Code::Unimplemented)).once());
    let err = client.version().await.unwrap_err();
    assert!(matches!(err, CriError::NotCriV1 { .. }), "{err}");
    assert!(client.version().await.is_ok());
    proxy.shutdown();
}
