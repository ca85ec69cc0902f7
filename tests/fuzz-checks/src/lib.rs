//! What each fuzz target checks, as plain functions of the input bytes: the cargo-fuzz targets
//! in `fuzz/fuzz_targets/` call them (coverage-guided, `fuzz/run.sh`), and this crate's test runs
//! them over the committed seeds and a deterministic stream of mutations of them on stable, in
//! the normal test suite — so a target cannot stop compiling unnoticed again (docs/fuzzing.md).
//! Every check must never panic on any input; each states its own properties besides.

use std::collections::{BTreeMap, HashMap, HashSet};

use inplaced::hashing::{
    Era, GoJsonEscaping, HashOptions, HashedPayload, KubeletVersion, hash_container, hashed_json,
    spew_fnv32a, validate_container,
};
use inplaced::quantity::{Quantity, go_trim_space};
use inplaced::resources::Resources;
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

/// What a target checks of one input.
pub type Check = fn(&[u8]);

/// The targets, by name: what `fuzz/run.sh` runs and the seed directories are named after.
pub const TARGETS: [(&str, Check); 7] = [
    ("container_decoder", container_decoder),
    ("quantity_parser", quantity_parser),
    ("crr_decoder", crr_decoder),
    ("resize_request_decoder", resize_request_decoder),
    ("env_parser", env_parser),
    ("restart_request_decoder", restart_request_decoder),
    ("checkpoint_reader", checkpoint_reader),
];

/// The Go-faithful container decoder: every input is hashed or rejected, for every era;
/// accepting does not depend on the Go escaping flavour; `--explain` agrees with hashing; era C's
/// accept-only reader accepts exactly what the full decoder accepts.
pub fn container_decoder(data: &[u8]) {
    for minor in [16, 26, 28, 30, 33, 36] {
        let Ok(version) = KubeletVersion::from_minor(minor) else {
            return;
        };
        let legacy = hash_container(
            data,
            &version,
            &HashOptions::with_escaping(GoJsonEscaping::Legacy),
        );
        let modern = hash_container(
            data,
            &version,
            &HashOptions::with_escaping(GoJsonEscaping::Modern),
        );
        assert_eq!(legacy.is_ok(), modern.is_ok());
        if version.era() == Era::C {
            assert_eq!(validate_container(data, &version).is_ok(), modern.is_ok());
        }
        let explained = hashed_json(
            data,
            &version,
            &HashOptions::with_escaping(GoJsonEscaping::Modern),
            HashedPayload::Hash,
        );
        match (modern, explained) {
            (Ok(h), Ok(j)) => assert_eq!(h.hash, u64::from(spew_fnv32a(&j))),
            (Err(_), Err(_)) => {}
            (a, b) => panic!("hash {a:?} vs explain {b:?}"),
        }
    }
}

/// apimachinery's Quantity parser and printer: whatever parses prints, and its canonical form
/// parses again (unless refused as too large).
pub fn quantity_parser(data: &[u8]) {
    let Ok(q) = Quantity::parse(go_trim_space(data)) else {
        return;
    };
    let _ = q.to_json_text();
    if let Ok(c) = q.canonical() {
        assert!(
            Quantity::parse(c.as_bytes()).is_ok(),
            "canonical {c:?} does not parse"
        );
    }
}

/// The API object the watch hands the agent; what does not parse as one never reaches it.
fn api_object(data: &[u8]) -> Option<kube::core::DynamicObject> {
    serde_json::from_slice(data).ok()
}

/// A kill intent of `app` (container `a1`) for the request `key` at the end of time, with the
/// longest grace: what a corrupted journal line could hold.
fn extreme_intent(key: &str) -> inplaced::restart::KillIntent {
    inplaced::restart::KillIntent {
        key: key.to_owned(),
        container: "app".into(),
        container_id: "a1".into(),
        started_ms: i64::MAX - 1,
        grace_ms: i64::MAX,
    }
}

/// A ContainerRecreateRequest: decoding takes any object (a bad spec is kept for the status),
/// and the decision against a running pod, with and without an earlier kill intent, at the ends
/// of time, never kills a container the request does not name.
pub fn crr_decoder(data: &[u8]) {
    use inplaced::recreate::object::Crr;
    use inplaced::recreate::plan::{Facts, PodFacts, RuntimeFacts, decide};

    let Some(object) = api_object(data) else {
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
        backoff_hold: None,
    };
    let pod = PodFacts {
        uid: request
            .labels
            .get("crr.apps.kruise.io/pod-uid")
            .cloned()
            .unwrap_or_default(),
        terminating: false,
        containers: HashMap::from([
            ("app".to_string(), running("a1", 0)),
            ("side".to_string(), running("s1", 3)),
        ]),
    };
    let intent = extreme_intent(&request.uid);
    let in_flight = HashSet::new();
    let failures = HashMap::new();
    let named: Vec<&str> = request
        .spec
        .as_ref()
        .map(|s| s.containers.iter().map(|c| c.name.as_str()).collect())
        .unwrap_or_default();
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
            for kill in &decision.kills {
                assert!(
                    named.contains(&kill.container.as_str()),
                    "killed an unnamed container"
                );
            }
        }
    }
}

/// A ContainerRestartRequest: decoding takes any object, and the decision against a pod of two
/// running containers (with a preStop hook), with and without an earlier kill intent, at the
/// ends of time, never stops a container the request does not name (none named: every app
/// container), never one of a pod whose UID differs from the one it names, and never a
/// container twice in one decision.
pub fn restart_request_decoder(data: &[u8]) {
    use inplaced::restartrequest::object::RestartRequest;
    use inplaced::restartrequest::plan::{ContainerFacts, Facts, PodFacts, decide};

    let Some(object) = api_object(data) else {
        return;
    };
    let Ok(request) = RestartRequest::from_object(&object) else {
        return;
    };
    let running = |id: &str| ContainerFacts {
        container_id: format!("containerd://{id}"),
        id: id.into(),
        running: true,
        started_at: Some(Timestamp::UNIX_EPOCH),
        ready_in_pod_status: true,
        ..Default::default()
    };
    let pod = PodFacts {
        uid: "pod-uid".into(),
        terminating: false,
        static_pod: false,
        restart_policy: "Always".into(),
        termination_grace_seconds: Some(i64::MAX),
        containers: vec![
            ("app".into(), Some(running("a1"))),
            ("side".into(), Some(running("s1"))),
        ],
    };
    let intent = extreme_intent(&request.uid);
    let in_flight = HashSet::new();
    let failures = HashMap::new();
    let spec = request.spec.as_ref().ok();
    let named: Vec<&str> = spec
        .map(|s| s.containers.iter().map(|c| c.name.as_str()).collect())
        .unwrap_or_default();
    let other_pod = spec
        .and_then(|s| s.pod_uid.as_deref())
        .is_some_and(|uid| uid != pod.uid);
    for now in [Timestamp::MIN, Timestamp::UNIX_EPOCH, Timestamp::MAX] {
        for intents in [HashMap::new(), HashMap::from([("app", &intent)])] {
            let decision = decide(
                &request,
                &Facts {
                    now,
                    node_name: "node-1",
                    pod: Some(&pod),
                    known_for: std::time::Duration::from_secs(60),
                    intents,
                    in_flight: &in_flight,
                    kill_failures: &failures,
                },
            );
            let mut stopped = HashSet::new();
            for kill in &decision.kills {
                assert!(
                    named.is_empty() || named.contains(&kill.container.as_str()),
                    "stopped an unnamed container"
                );
                assert!(!other_pod, "stopped a container of another pod");
                assert!(stopped.insert(kill.container.as_str()), "stopped twice");
            }
        }
    }
}

/// A ContainerResizeRequest: decoding takes any object; for a request that decodes, the checks
/// against a pod (QoS, LimitRange, allocatable), the CRI values and the pod cgroup values never
/// panic, and a request that passes the checks never asks for a request above its limit.
pub fn resize_request_decoder(data: &[u8]) {
    use inplaced::resize::object::ResizeRequest;
    use inplaced::resize::resources::{
        self, ZeroCpuRequest, check_resize, cri_resources, pod_cgroup_config, qos_class,
    };

    let Some(object) = api_object(data) else {
        return;
    };
    let Ok(request) = ResizeRequest::from_object(&object) else {
        return;
    };
    let pod = [(
        "app".to_string(),
        Resources {
            cpu_request: Some(100),
            cpu_limit: Some(200),
            memory_request: Some(32 << 20),
            memory_limit: Some(64 << 20),
        },
    )];
    let mut after = pod.clone();
    for desired in request.desired() {
        if let Some((_, r)) = after.iter_mut().find(|(n, _)| *n == desired.name) {
            *r = r.overlay(&desired.resources);
        }
    }
    let allocatable = Resources {
        cpu_request: Some(2000),
        memory_request: Some(1 << 30),
        ..Default::default()
    };
    let limit_range = json!({"metadata": {"name": "lr"}, "spec": {"limits": [
        {"type": "Container", "max": {"cpu": "4", "memory": "8Gi"}, "min": {"cpu": "1m"},
         "maxLimitRequestRatio": {"cpu": "10"}},
        {"type": "Pod", "max": {"cpu": "8"}}]}});
    let ok = check_resize(&pod, &after, &[], &allocatable, &[limit_range]).is_ok();
    let all: Vec<Resources> = after.iter().map(|(_, r)| *r).collect();
    let _ = pod_cgroup_config(&all, &[], qos_class(&all));
    for (_, r) in &after {
        for rule in [ZeroCpuRequest::TakesTheLimit, ZeroCpuRequest::MinimumShares] {
            let cri = cri_resources(r, rule);
            let _ = resources::from_cri(&cri);
        }
        let cri = cri_resources(r, ZeroCpuRequest::MinimumShares);
        let _ = resources::from_cri(&cri);
        let _ = r.to_requirements();
        if ok {
            assert!(r.cpu_request <= r.cpu_limit || r.cpu_limit.is_none());
            assert!(r.memory_request <= r.memory_limit || r.memory_limit.is_none());
        }
    }
}

/// A container's environment as the agent reads it (containerd's verbose info, `env` output)
/// and kruise's env-from-metadata hash over a container spec: the last `KEY=` wins and every key
/// parsed came from the input.
pub fn env_parser(data: &[u8]) {
    use inplaced::containermeta::plan::{env_from_verbose_info, parse_env};
    use inplaced::hashing::extracted_env_from_metadata_hash;

    let text = String::from_utf8_lossy(data);
    let env = parse_env(text.lines());
    for key in env.keys() {
        assert!(text.contains(&format!("{key}=")));
    }
    let _ = env_from_verbose_info(&HashMap::from([("info".to_string(), text.to_string())]));
    // The container spec is the input; labels and annotations come from the env just parsed.
    let labels: BTreeMap<String, String> = env.clone().into_iter().collect();
    let annotations = BTreeMap::new();
    let _ = extracted_env_from_metadata_hash(data, &labels, &annotations);
}

/// The kubelet checkpoint reader of `inplaced upgrade-check`: any content as any of the three
/// files, for kubelets 1.27 to 1.37, gives one finding per file with a message, and an envelope
/// whose stored checksum is the kubelet's checksum of its data reads as such.
pub fn checkpoint_reader(data: &[u8]) {
    use inplaced::checkpoints::{check, classify};

    let (_, checksum_ok) = classify(data);
    if let Ok(serde_json::Value::Object(top)) = serde_json::from_slice(data)
        && let (Some(text), Some(stored)) = (
            top.get("data").and_then(|d| d.as_str()),
            top.get("checksum").and_then(|c| c.as_u64()),
        )
    {
        assert_eq!(checksum_ok, Some(stored == kubelet_checksum(text)));
    }
    let dir = scratch_dir();
    let files = [
        "pod_status_manager_state",
        "allocated_pods_state",
        "actuated_pods_state",
    ];
    for file in files {
        if std::fs::write(dir.join(file), data).is_err() {
            return;
        }
    }
    for minor in 27..=37 {
        let Ok(version) = KubeletVersion::from_minor(minor) else {
            continue;
        };
        let findings = check(&dir, &version);
        assert_eq!(findings.len(), files.len(), "{findings:?}");
        assert!(findings.iter().all(|f| !f.message.is_empty()));
    }
}

/// FNV-1a 32-bit over go-spew's dump of a Go string (`(string)` then the bytes): the kubelet's
/// checkpoint checksum since 1.32, written out here so the check does not share the reader's code.
fn kubelet_checksum(data: &str) -> u64 {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in b"(string)".iter().chain(data.as_bytes()) {
        hash ^= u32::from(*byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    u64::from(hash)
}

/// A directory of this process and thread for the checkpoint files.
fn scratch_dir() -> std::path::PathBuf {
    let thread = format!("{:?}", std::thread::current().id());
    let digits: String = thread.chars().filter(char::is_ascii_digit).collect();
    let dir = std::env::temp_dir().join(format!("inplaced-fuzz-{}-{digits}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    dir
}
