//! The node view's runtime listing against the real containerd: each container and sandbox is
//! decoded in full once; a refresh reads IDs and states through the brief views and lists in
//! full only when an ID is new. Alone in its binary: it counts this client's calls and expects
//! no other test to create containers meanwhile.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use inplaced::cri::proto::{Container, ContainerState, PodSandbox, PodSandboxState};
use inplaced::cri::{CallObserver, CriClient, CriConfig};
use inplaced::kube::CachedPod;
use inplaced::nodeview::{self, RuntimeSnapshot, RuntimeTracker};
use support::TestPod;

#[derive(Default)]
struct Calls(Mutex<HashMap<&'static str, usize>>);

impl CallObserver for Calls {
    fn observe(&self, method: &'static str, _code: tonic::Code, _elapsed: Duration) {
        *self.0.lock().unwrap().entry(method).or_default() += 1;
    }
}

impl Calls {
    fn take(&self, method: &str) -> usize {
        self.0.lock().unwrap().remove(method).unwrap_or(0)
    }
}

/// The snapshot must show what a full listing shows: the same objects in the same states, and
/// the same node view when joined with the pod. Kubelet annotations the view never reads are
/// not kept (the cache is most of the agent's memory on a big node).
async fn assert_matches_full_listing(cri: &CriClient, snapshot: &RuntimeSnapshot, pod: &TestPod) {
    let mut full: Vec<Container> = cri.list_containers(None).await.unwrap();
    full.sort_by(|a, b| a.id.cmp(&b.id));
    let fields = |c: &Container| {
        (
            c.id.clone(),
            c.pod_sandbox_id.clone(),
            c.metadata.clone(),
            c.image.as_ref().map(|i| i.image.clone()),
            c.state,
            c.created_at,
        )
    };
    let listed: Vec<_> = snapshot.containers.iter().map(|c| fields(c)).collect();
    assert_eq!(listed, full.iter().map(fields).collect::<Vec<_>>());
    for c in &snapshot.containers {
        assert!(
            !c.annotations
                .contains_key("io.kubernetes.container.terminationMessagePath"),
            "unread annotations are not cached"
        );
    }
    let mut sandboxes: Vec<PodSandbox> = cri.list_pod_sandboxes(None).await.unwrap();
    sandboxes.sort_by(|a, b| a.id.cmp(&b.id));
    let fields = |s: &PodSandbox| (s.id.clone(), s.metadata.clone(), s.state, s.created_at);
    let listed: Vec<_> = snapshot.sandboxes.iter().map(|s| fields(s)).collect();
    assert_eq!(listed, sandboxes.iter().map(fields).collect::<Vec<_>>());

    // The view joined from the snapshot is the view joined from the untrimmed listing.
    let names: std::collections::BTreeSet<&str> = full
        .iter()
        .filter_map(|c| c.metadata.as_ref().map(|m| m.name.as_str()))
        .collect();
    let containers: Vec<_> = names
        .iter()
        .map(|name| serde_json::json!({"name": name, "image": "localhost/busybox:local"}))
        .collect();
    let api_pod: CachedPod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
        "spec": {"containers": containers},
    }))
    .unwrap();
    let pods = [Arc::new(api_pod)];
    let untrimmed = RuntimeSnapshot {
        runtime: snapshot.runtime.clone(),
        sandboxes: sandboxes.into_iter().map(Arc::new).collect(),
        containers: full.into_iter().map(Arc::new).collect(),
        times: snapshot.times.clone(),
    };
    let view = |snapshot: &RuntimeSnapshot| {
        serde_json::to_value(nodeview::join("node", &pods, snapshot)).unwrap()
    };
    let joined = view(snapshot);
    assert_eq!(joined, view(&untrimmed));
    assert!(
        joined["pods"][0]["containers"][0]["runtime"]["stored_hash"].is_string(),
        "the stored hash is kept: {joined}"
    );
}

fn state_of(snapshot: &RuntimeSnapshot, id: &str) -> Option<i32> {
    snapshot
        .containers
        .iter()
        .find(|c| c.id == id)
        .map(|c| c.state)
}

#[tokio::test]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn known_objects_are_decoded_once_and_kept_current_by_state() {
    let calls = Arc::new(Calls::default());
    let cri = CriClient::new(CriConfig::new(support::endpoint())).with_observer(calls.clone());
    let mut tracker = RuntimeTracker::new(cri.clone());
    let pod = TestPod::run(&cri, "listing").await;
    let first = pod
        .start_container(&cri, "first", "exec sleep 600", "1")
        .await;
    for name in ["a", "b", "c"] {
        pod.start_container(&cri, name, "exec sleep 600", "1").await;
    }

    let snapshot = tracker.refresh().await.unwrap();
    assert_eq!(
        state_of(&snapshot, &first),
        Some(ContainerState::ContainerRunning as i32)
    );
    assert_matches_full_listing(&cri, &snapshot, &pod).await;
    calls.take("ListContainers");
    calls.take("ListPodSandbox");

    // Steady: one brief call each, the very same objects as before, in the same order
    // (containerd lists in Go map order, different from call to call).
    for _ in 0..5 {
        let again = tracker.refresh().await.unwrap();
        assert_eq!(calls.take("ListContainers"), 1);
        assert_eq!(calls.take("ListPodSandbox"), 1);
        assert!(
            again.same_as(&snapshot),
            "an unchanged runtime is the same snapshot"
        );
        for (a, b) in again.containers.iter().zip(&snapshot.containers) {
            assert!(Arc::ptr_eq(a, b), "a known container is not decoded again");
        }
    }

    // A state change is seen through the brief view alone.
    cri.stop_container(&first, Duration::from_secs(2))
        .await
        .unwrap();
    let snapshot = tracker.refresh().await.unwrap();
    assert_eq!(calls.take("ListContainers"), 1);
    assert_eq!(
        state_of(&snapshot, &first),
        Some(ContainerState::ContainerExited as i32)
    );
    assert_matches_full_listing(&cri, &snapshot, &pod).await;
    calls.take("ListContainers");
    calls.take("ListPodSandbox");

    // A new container: listed in full, labels and annotations included.
    let second = pod
        .start_container(&cri, "second", "exec sleep 600", "2")
        .await;
    let snapshot = tracker.refresh().await.unwrap();
    assert_eq!(calls.take("ListContainers"), 2, "brief, then full");
    assert_eq!(
        state_of(&snapshot, &second),
        Some(ContainerState::ContainerRunning as i32)
    );
    assert_matches_full_listing(&cri, &snapshot, &pod).await;
    calls.take("ListContainers");
    calls.take("ListPodSandbox");

    // A removed container and a stopped sandbox: gone and NotReady without a full listing.
    cri.stop_container(&second, Duration::from_secs(2))
        .await
        .unwrap();
    cri.remove_container(&first).await.unwrap();
    cri.stop_pod_sandbox(&pod.sandbox_id).await.unwrap();
    let snapshot = tracker.refresh().await.unwrap();
    assert_eq!(calls.take("ListContainers"), 1);
    assert_eq!(calls.take("ListPodSandbox"), 1);
    assert_eq!(state_of(&snapshot, &first), None);
    let sandbox = snapshot
        .sandboxes
        .iter()
        .find(|s| s.id == pod.sandbox_id)
        .expect("the stopped sandbox is still listed");
    assert_eq!(sandbox.state, PodSandboxState::SandboxNotready as i32);
    assert!(snapshot.times.contains_key(&second) && !snapshot.times.contains_key(&first));
    assert_matches_full_listing(&cri, &snapshot, &pod).await;
    pod.remove(&cri).await;
}
