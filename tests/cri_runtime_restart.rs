//! containerd stopped and started again under a live client. This is the only test in its binary:
//! cargo runs test binaries one after another, so no other test sees the runtime go away.

mod support;

use std::time::Duration;

use inplaced::cri::proto::{ContainerFilter, ContainerState};
use inplaced::cri::{CriClient, CriConfig, CriError, labels};
use support::{TestPod, endpoint};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn client_reconnects_after_containerd_restarts_and_retries_only_idempotent_calls() {
    let mut config = CriConfig::new(endpoint());
    config.max_attempts = 12;
    config.retry_max_delay = Duration::from_millis(500);
    let patient = CriClient::new(config.clone());
    config.max_attempts = 1;
    let impatient = CriClient::new(config);

    let pod = TestPod::run(&patient, "restart").await;
    let id = pod
        .start_container(&patient, "app", "exec sleep 600", "1")
        .await;
    let by_pod = ContainerFilter {
        label_selector: [(labels::POD_UID.to_string(), pod.uid.clone())].into(),
        ..Default::default()
    };
    // Open the connection so that what follows exercises a reconnect, not a first connect.
    patient.list_containers(Some(by_pod.clone())).await.unwrap();

    support::containerd_script("stop-daemon");
    let down = impatient.list_containers(None).await.unwrap_err();
    assert!(matches!(down, CriError::Unavailable { .. }), "{down}");
    assert!(down.is_transient());
    assert!(
        down.to_string().contains("containerd.sock"),
        "names the endpoint: {down}"
    );

    // While the runtime is down: one idempotent and one non-idempotent call, then the runtime
    // comes back. The read is retried until it succeeds; the start is not retried.
    let restarter = tokio::spawn(async {
        tokio::time::sleep(Duration::from_millis(700)).await;
        tokio::task::spawn_blocking(|| support::containerd_script("start-daemon"))
            .await
            .unwrap();
    });
    let (listed, started) = tokio::join!(
        patient.list_containers(Some(by_pod.clone())),
        patient.start_container(&id),
    );
    restarter.await.unwrap();
    let listed = listed.expect("idempotent call retried across the restart");
    let started = started.expect_err("non-idempotent call must not be retried");
    assert!(started.is_transient(), "{started}");

    // The container survived the runtime restart, and the same client keeps working.
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, id);
    assert_eq!(listed[0].state, ContainerState::ContainerRunning as i32);
    let info = impatient.version().await.expect("reconnected");
    assert_eq!(info.runtime_name, "containerd");
    pod.remove(&patient).await;
}
