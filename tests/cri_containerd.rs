//! The CRI client against the real containerd of `tests/node/containerd.sh`.

mod support;

use std::time::{Duration, Instant};

use inplaced::cri::labels;
use inplaced::cri::proto::{ContainerFilter, ContainerState, PodSandboxFilter};
use support::{TestPod, client};

#[tokio::test]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn version_reports_containerd_speaking_cri_v1() {
    let info = client().version().await.expect("Version");
    assert_eq!(info.runtime_name, "containerd");
    assert_eq!(info.runtime_api_version, "v1");
    assert!(!info.runtime_version.is_empty());
}

#[tokio::test]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn kubelet_style_pod_lists_back_with_its_labels_and_annotations() {
    let cri = client();
    let pod = TestPod::run(&cri, "list").await;
    let app = pod
        .start_container(&cri, "app", "exec sleep 600", "3c42280f")
        .await;
    let sidecar = pod
        .start_container(&cri, "sidecar", "exec sleep 600", "8e45cbd0")
        .await;

    let sandboxes = cri
        .list_pod_sandboxes(Some(PodSandboxFilter {
            label_selector: [(labels::POD_UID.to_string(), pod.uid.clone())].into(),
            ..Default::default()
        }))
        .await
        .unwrap();
    assert_eq!(sandboxes.len(), 1);
    let sandbox = &sandboxes[0];
    assert_eq!(sandbox.id, pod.sandbox_id);
    assert_eq!(sandbox.labels[labels::POD_NAME], pod.name);
    assert_eq!(sandbox.labels["app"], "list");
    assert_eq!(sandbox.annotations["example.com/owner"], "tests");

    let containers = cri
        .list_containers(Some(ContainerFilter {
            label_selector: [(labels::POD_UID.to_string(), pod.uid.clone())].into(),
            ..Default::default()
        }))
        .await
        .unwrap();
    let mut names: Vec<_> = containers
        .iter()
        .map(|c| (c.labels[labels::CONTAINER_NAME].clone(), c.id.clone()))
        .collect();
    names.sort();
    assert_eq!(
        names,
        vec![
            ("app".to_string(), app.clone()),
            ("sidecar".to_string(), sidecar)
        ]
    );
    let app_entry = containers.iter().find(|c| c.id == app).unwrap();
    assert_eq!(app_entry.pod_sandbox_id, pod.sandbox_id);
    assert_eq!(app_entry.annotations[labels::CONTAINER_HASH], "3c42280f");
    assert_eq!(app_entry.annotations[labels::CONTAINER_RESTART_COUNT], "0");
    assert_eq!(app_entry.state, ContainerState::ContainerRunning as i32);
    pod.remove(&cri).await;
}

#[tokio::test]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn container_status_reports_state_times_resources_and_verbose_info() {
    let cri = client();
    let pod = TestPod::run(&cri, "status").await;
    let id = pod
        .start_container(&cri, "app", "exec sleep 600", "1")
        .await;
    let response = cri.container_status(&id, true).await.unwrap();
    let status = response.status.expect("status");
    assert_eq!(status.id, id);
    assert_eq!(status.state, ContainerState::ContainerRunning as i32);
    assert!(status.created_at > 0 && status.started_at >= status.created_at);
    assert_eq!(status.finished_at, 0);
    let resources = status
        .resources
        .and_then(|r| r.linux)
        .expect("containerd 1.6.20 reports resources");
    assert_eq!(
        (resources.cpu_quota, resources.cpu_period),
        (50_000, 100_000)
    );
    assert_eq!(resources.memory_limit_in_bytes, 64 << 20);
    // Verbose info carries the OCI spec: the env the container started with comes from there.
    let info = &response.info["info"];
    assert!(
        info.contains("\"runtimeSpec\""),
        "verbose info: {}",
        &info[..info.len().min(200)]
    );

    let missing = cri
        .container_status(
            "0000000000000000000000000000000000000000000000000000000000000000",
            false,
        )
        .await;
    assert!(missing.unwrap_err().is_not_found());
    pod.remove(&cri).await;
}

#[tokio::test]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn exec_sync_returns_output_and_exit_code() {
    let cri = client();
    let pod = TestPod::run(&cri, "exec").await;
    let id = pod
        .start_container(&cri, "app", "exec sleep 600", "1")
        .await;
    let result = cri
        .exec_sync(
            &id,
            vec![
                "/bin/sh".into(),
                "-c".into(),
                "echo out; echo err >&2; exit 3".into(),
            ],
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    assert_eq!(result.stdout, b"out\n");
    assert_eq!(result.stderr, b"err\n");
    assert_eq!(result.exit_code, 3);
    pod.remove(&cri).await;
}

#[tokio::test]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn stop_container_honours_sigterm_and_the_grace_timeout() {
    let cri = client();
    let pod = TestPod::run(&cri, "stop").await;
    // PID 1 without a handler ignores SIGTERM: only the SIGKILL after the grace period ends it.
    let stubborn = pod
        .start_container(&cri, "stubborn", "exec sleep 600", "1")
        .await;
    let polite = pod
        .start_container(
            &cri,
            "polite",
            "trap 'exit 0' TERM; touch /tmp/trapped; while true; do sleep 0.1; done",
            "1",
        )
        .await;
    // A SIGTERM that arrives before the shell has set its trap is ignored (PID 1 has no default
    // action): wait until it has.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let probe = cri
            .exec_sync(
                &polite,
                vec!["test".into(), "-f".into(), "/tmp/trapped".into()],
                Duration::from_secs(5),
            )
            .await
            .unwrap();
        if probe.exit_code == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the trap was never set");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let started = Instant::now();
    cri.stop_container(&polite, Duration::from_secs(10))
        .await
        .unwrap();
    let polite_took = started.elapsed();
    let started = Instant::now();
    cri.stop_container(&stubborn, Duration::from_secs(2))
        .await
        .unwrap();
    let stubborn_took = started.elapsed();

    assert!(
        polite_took < Duration::from_secs(5),
        "SIGTERM handler ignored? took {polite_took:?}"
    );
    assert!(
        stubborn_took >= Duration::from_secs(2),
        "killed before the grace period: {stubborn_took:?}"
    );
    let polite_status = cri
        .container_status(&polite, false)
        .await
        .unwrap()
        .status
        .unwrap();
    let stubborn_status = cri
        .container_status(&stubborn, false)
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(polite_status.state, ContainerState::ContainerExited as i32);
    assert_eq!(polite_status.exit_code, 0);
    assert_eq!(
        stubborn_status.state,
        ContainerState::ContainerExited as i32
    );
    assert_eq!(stubborn_status.exit_code, 137, "SIGKILL");
    assert!(stubborn_status.finished_at > stubborn_status.started_at);
    pod.remove(&cri).await;
}

/// The container event stream where the runtime has one: containerd 1.6 answers
/// `GetContainerEvents` with an error (the agent then polls `ListContainers`), 1.7 and 2.x stream
/// a container's creation and start as they happen.
#[tokio::test]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn container_events_stream_from_1_7_and_are_refused_by_1_6() {
    use inplaced::cri::proto::ContainerEventType;
    let cri = client();
    let version = cri.version().await.expect("Version").runtime_version;
    let events = tokio::spawn({
        let cri = cri.clone();
        async move { cri.container_events().await }
    });
    // The subscription is in place before anything happens.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pod = TestPod::run(&cri, "events").await;
    let app = pod
        .start_container(&cri, "app", "exec sleep 600", "3c42280f")
        .await;
    let answer = tokio::time::timeout(Duration::from_secs(10), events)
        .await
        .expect("the runtime answers GetContainerEvents once something happens")
        .expect("joined");
    if version.starts_with("1.6") {
        assert!(answer.is_err(), "containerd {version} streams events");
    } else {
        let mut stream = answer.unwrap_or_else(|e| panic!("containerd {version}: {e}"));
        let mut seen = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !seen.contains(&ContainerEventType::ContainerStartedEvent) {
            let left = deadline.saturating_duration_since(Instant::now());
            let event = tokio::time::timeout(left, stream.message())
                .await
                .unwrap_or_else(|_| panic!("containerd {version}: only {seen:?} for {app}"))
                .expect("stream")
                .expect("an event");
            if event.container_id == app {
                seen.push(event.container_event_type());
            }
        }
        assert!(
            seen.contains(&ContainerEventType::ContainerCreatedEvent),
            "containerd {version}: {seen:?}"
        );
    }
    pod.remove(&cri).await;
}
