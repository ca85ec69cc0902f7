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
use inplaced::nodeview::{RuntimeSnapshot, RuntimeTracker};
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

/// The snapshot must show exactly what a full listing shows, field for field.
async fn assert_matches_full_listing(cri: &CriClient, snapshot: &RuntimeSnapshot) {
    let mut full: Vec<Container> = cri.list_containers(None).await.unwrap();
    let mut listed: Vec<Container> = snapshot.containers.iter().map(|c| (**c).clone()).collect();
    full.sort_by(|a, b| a.id.cmp(&b.id));
    listed.sort_by(|a, b| a.id.cmp(&b.id));
    assert_eq!(listed, full);
    let mut full: Vec<PodSandbox> = cri.list_pod_sandboxes(None).await.unwrap();
    let mut listed: Vec<PodSandbox> = snapshot.sandboxes.iter().map(|s| (**s).clone()).collect();
    full.sort_by(|a, b| a.id.cmp(&b.id));
    listed.sort_by(|a, b| a.id.cmp(&b.id));
    assert_eq!(listed, full);
}

fn state_of(snapshot: &RuntimeSnapshot, id: &str) -> Option<i32> {
    snapshot
        .containers
        .iter()
        .find(|c| c.id == id)
        .map(|c| c.state)
}

#[tokio::test]
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
    assert_matches_full_listing(&cri, &snapshot).await;
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
    assert_matches_full_listing(&cri, &snapshot).await;
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
    assert_matches_full_listing(&cri, &snapshot).await;
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
    assert_matches_full_listing(&cri, &snapshot).await;
    pod.remove(&cri).await;
}
