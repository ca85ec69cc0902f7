//! A ContainerRecreateRequest from the API, whatever its content, must never panic the agent:
//! decoding takes any JSON (a bad spec is kept as an error for the status), and the decision for
//! a decoded request — against a running pod, with and without an earlier kill intent, at a
//! fixed time and at the ends of time — never panics and never kills a container the request
//! does not name.
#![no_main]

use std::collections::{HashMap, HashSet};

use inplaced::recreate::crr::Crr;
use inplaced::restart::KillIntent;
use inplaced::recreate::plan::{Facts, PodFacts, RuntimeFacts, decide};
use k8s_openapi::jiff::Timestamp;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The watch hands the agent API objects: what does not parse as one never reaches it.
    let Ok(object) = serde_json::from_slice::<kube::core::DynamicObject>(data) else {
        return;
    };
    let Ok(request) = Crr::from_object(&object) else {
        return;
    };
    let running = |id: &str, restarts: i32| RuntimeFacts {
        container_id: format!("containerd://{id}"),
        id: id.into(),
        running: true,
        restart_count: restarts,
        started_at: Some(Timestamp::UNIX_EPOCH),
        ready_in_pod_status: true,
    };
    let pod = PodFacts {
        uid: request.labels.get("crr.apps.kruise.io/pod-uid").cloned().unwrap_or_default(),
        terminating: false,
        containers: HashMap::from([
            ("app".to_string(), running("a1", 0)),
            ("side".to_string(), running("s1", 3)),
        ]),
    };
    let intent = KillIntent {
        key: request.uid.clone(),
        container: "app".into(),
        container_id: "a1".into(),
        started_ms: i64::MAX - 1,
        grace_ms: i64::MAX,
    };
    let in_flight = HashSet::new();
    let failures = HashMap::new();
    for now in [Timestamp::MIN, Timestamp::UNIX_EPOCH, Timestamp::MAX] {
        for intents in [HashMap::new(), HashMap::from([("app", &intent)])] {
            let decision = decide(
                &request,
                &Facts {
                    now,
                    pod: Some(&pod),
                    intents,
                    in_flight: &in_flight,
                    kill_failures: &failures,
                },
            );
            let named: Vec<&str> = request
                .spec
                .as_ref()
                .map(|s| s.containers.iter().map(|c| c.name.as_str()).collect())
                .unwrap_or_default();
            for kill in &decision.kills {
                assert!(named.contains(&kill.container.as_str()), "killed an unnamed container");
            }
        }
    }
});
