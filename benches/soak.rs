//! The soak of issues 12 and 50, against real containerd: PODS real pods (default 50) of two
//! Burstable containers, and a seeded stream of CRRS ContainerRecreateRequests (default 500)
//! mixed with env-from-metadata changes, ContainerResizeRequests and ContainerRestartRequests (a
//! fifth of CRRS each), one every 100 ms in random order on random pods: concurrent and
//! overlapping on the same pods and containers. Then it waits for everything to settle and
//! checks what issue 12 asks of it:
//! - every CRR completed, every container it names Succeeded (one replaced meanwhile by an
//!   overlapping restart counts as recreated, as kruise counts it);
//! - every resize request and every restart request ended Succeeded;
//! - every pod's `app` runs with the env value of the last change;
//! - no container ever got more than one StopContainer (the CRI proxy counts), and the agent
//!   never exited.
//!
//! Reports throughput, latency percentiles per kind, and the agent's RSS every 10 s (its curve)
//! with its peak.
//!
//!     cargo bench -p inplaced --bench soak [-- PODS CRRS SEED]

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::{Value, json};
use support::measure::{summary, usage};
use support::sandbox::{NS, Node, NodeOptions, all_running, container_id};
use support::unique;

const OPT_IN: &str = "inplaced.io/runtime-containers-meta";
const POLITE: &str = "trap 'exit 0' TERM; while true; do sleep 0.1; done";
const SETTLE: Duration = Duration::from_secs(600);

fn container(name: &str, limits_cpu: &str, limits_memory: &str) -> Value {
    json!({"name": name, "image": "localhost/busybox:local",
           "command": ["/bin/sh", "-c", POLITE],
           "resources": {"requests": {"cpu": "20m", "memory": "16Mi"},
                         "limits": {"cpu": limits_cpu, "memory": limits_memory}}})
}

/// `app` takes V from the pod annotation `v` (restarted by the agent when it changes); `side`
/// is the one resized.
fn pod_spec() -> Value {
    let mut app = container("app", "100m", "32Mi");
    app["env"] = json!([{"name": "V", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['v']"}}}]);
    json!({"containers": [app, container("side", "100m", "32Mi")]})
}

fn phase(object: &Value) -> Option<&str> {
    object.pointer("/status/phase").and_then(Value::as_str)
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Kind {
    Recreate,
    EnvChange,
    Resize,
    Restart,
}

/// How often the agent's RSS is written down for its curve.
const RSS_SAMPLE: Duration = Duration::from_secs(10);

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = support::measure::numeric_args();
    let pods = args.first().copied().unwrap_or(50) as usize;
    let crrs = args.get(1).copied().unwrap_or(500) as usize;
    let seed = args.get(2).copied().unwrap_or(20261124);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut stream: Vec<Kind> = std::iter::repeat_n(Kind::Recreate, crrs)
        .chain(std::iter::repeat_n(Kind::EnvChange, crrs / 5))
        .chain(std::iter::repeat_n(Kind::Resize, crrs / 5))
        .chain(std::iter::repeat_n(Kind::Restart, crrs / 5))
        .collect();
    // Fisher-Yates with the seeded generator: the same seed, the same stream.
    for i in (1..stream.len()).rev() {
        stream.swap(i, rng.random_range(0..=i));
    }

    // kubelet 1.31 with its resize gate off: resizes go through CRI.
    let mut node = Node::start_with(NodeOptions::kubelet("v1.31.12")).await;
    println!(
        "soak: {pods} pods x 2 containers, {} operations ({crrs} CRRs, {} env changes, {} resizes, {} restart requests), one every 100 ms, seed {seed}",
        stream.len(),
        crrs / 5,
        crrs / 5,
        crrs / 5
    );
    let names: Vec<String> = (0..pods).map(|_| unique("soak")).collect();
    for batch in names.chunks(25) {
        for name in batch {
            let mut spec = pod_spec();
            spec["nodeName"] = json!(node.node);
            spec["hostNetwork"] = json!(true);
            spec["terminationGracePeriodSeconds"] = json!(5);
            node.server
                .store()
                .create(
                    "pods",
                    json!({"metadata": {"name": name, "namespace": NS,
                                        "annotations": {"v": "0", OPT_IN: "true"}},
                           "spec": spec}),
                )
                .expect("create pod");
        }
        for name in batch {
            node.wait_pod(name, Duration::from_secs(300), all_running)
                .await;
        }
    }
    let pid = node.agent().pid();

    let started = Instant::now();
    let mut pending: Vec<(Kind, String, Instant)> = Vec::new();
    let mut latency: HashMap<Kind, Vec<f64>> = HashMap::new();
    let mut outcomes: HashMap<(Kind, String), usize> = HashMap::new();
    let mut env_values: HashMap<String, u64> = HashMap::new();
    let mut resizes_per_pod: HashMap<String, u64> = HashMap::new();
    let mut skipped = 0;
    let mut peak_rss_kb = 0;
    let mut rss_curve = RssCurve::new(pid);
    for (i, kind) in stream.iter().enumerate() {
        let pod_name = &names[rng.random_range(0..pods)];
        match kind {
            Kind::Recreate => {
                let containers: &[&str] = match rng.random_range(0..3) {
                    0 => &["app"],
                    1 => &["side"],
                    _ => &["app", "side"],
                };
                // The webhook needs the pod's running containers, as kruise's does.
                match node.pod(pod_name).filter(all_running) {
                    Some(pod) => match node.store_crr(&pod, containers) {
                        Some(name) => pending.push((*kind, name, Instant::now())),
                        None => skipped += 1,
                    },
                    None => skipped += 1,
                }
            }
            Kind::EnvChange => {
                let value = i as u64;
                env_values.insert(pod_name.clone(), value);
                node.patch_pod_metadata(pod_name, json!({"annotations": {"v": value.to_string()}}))
                    .await;
            }
            Kind::Resize => {
                let n = resizes_per_pod.entry(pod_name.clone()).or_default();
                *n += 1;
                let (cpu, memory) = if *n % 2 == 1 {
                    ("150m", "48Mi")
                } else {
                    ("100m", "32Mi")
                };
                let name = node
                    .create_resize(json!({"podName": pod_name, "containers": [
                        {"name": "side", "resources": {"requests": {"cpu": "20m", "memory": "16Mi"},
                                                        "limits": {"cpu": cpu, "memory": memory}}}]}))
                    .await;
                pending.push((*kind, name, Instant::now()));
            }
            Kind::Restart => {
                let containers = match rng.random_range(0..3) {
                    0 => json!([{"name": "app"}]),
                    1 => json!([{"name": "side"}]),
                    _ => json!([{"name": "app"}, {"name": "side"}]),
                };
                let name = node
                    .create_request(
                        "ContainerRestartRequest",
                        &node.node,
                        json!({"podName": pod_name, "containers": containers}),
                    )
                    .await;
                pending.push((*kind, name, Instant::now()));
            }
        }
        take_finished(&node, &mut pending, &mut latency, &mut outcomes);
        peak_rss_kb = peak_rss_kb.max(usage(pid).0);
        rss_curve.sample();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let issued = started.elapsed();

    // Settle: every request final.
    let deadline = Instant::now() + SETTLE;
    while !pending.is_empty() {
        if Instant::now() >= deadline {
            // Reported with the rest below, each with its last status, then failed.
            break;
        }
        assert!(
            node.agent().exit_status().is_none(),
            "the agent exited: {}",
            node.agent().log()
        );
        take_finished(&node, &mut pending, &mut latency, &mut outcomes);
        peak_rss_kb = peak_rss_kb.max(usage(pid).0);
        rss_curve.sample();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let settled = started.elapsed();
    for (kind, name, _) in &pending {
        let object = request_object(&node, *kind, name);
        println!(
            "never ended: {kind:?} {name}: annotations {} status {}",
            object["metadata"]["annotations"], object["status"]
        );
    }
    // Env changes: every pod's app runs with its last value.
    let mut env_wrong = Vec::new();
    for (pod_name, value) in &env_values {
        // Not `wait_pod`: a pod still in crash back-off is reported with the rest, not a panic.
        let mut last = None;
        let until = Instant::now() + Duration::from_secs(120);
        while Instant::now() < until {
            if let Some(pod) = node.pod(pod_name).filter(all_running) {
                last = support::env_of(&container_id(&pod, "app"), "V").await;
                if last.as_deref() == Some(value.to_string().as_str()) {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        if last.as_deref() != Some(value.to_string().as_str()) {
            env_wrong.push((pod_name.clone(), *value, last));
        }
    }
    let env_settled = started.elapsed();
    rss_curve.sample();

    let stops = node.proxy.stop_counts();
    let twice: Vec<_> = stops.iter().filter(|(_, n)| **n > 1).collect();
    let total_stops: usize = stops.values().sum();
    let mut outcome_lines: Vec<String> = outcomes
        .iter()
        .map(|((kind, outcome), n)| format!("{kind:?} {outcome}: {n}"))
        .collect();
    outcome_lines.sort();
    println!(
        "issued in {:.1} s ({skipped} CRRs skipped: pod not running at that instant); all requests final after {:.1} s, env values right after {:.1} s",
        issued.as_secs_f64(),
        settled.as_secs_f64(),
        env_settled.as_secs_f64()
    );
    println!(
        "throughput: {:.2} requests/s ({} CRRs + resizes over {:.1} s)",
        outcomes.values().sum::<usize>() as f64 / settled.as_secs_f64(),
        outcomes.values().sum::<usize>(),
        settled.as_secs_f64()
    );
    for line in &outcome_lines {
        println!("outcome {line}");
    }
    for kind in [Kind::Recreate, Kind::Resize, Kind::Restart] {
        println!(
            "{kind:?} created -> final: {}",
            summary(latency.remove(&kind).unwrap_or_default())
        );
    }
    println!(
        "StopContainer calls: {total_stops} on {} containers; containers stopped more than once: {}",
        stops.len(),
        twice.len()
    );
    println!(
        "env changes whose value is not running: {}",
        env_wrong.len()
    );
    println!(
        "agent peak RSS {:.1} MiB, now {:.1} MiB",
        peak_rss_kb as f64 / 1024.0,
        usage(pid).0 as f64 / 1024.0
    );
    println!(
        "agent RSS every {RSS_SAMPLE:?} (MiB): {}",
        rss_curve.describe()
    );
    assert!(pending.is_empty(), "{} requests never ended", pending.len());
    assert!(twice.is_empty(), "stopped more than once: {twice:?}");
    assert!(env_wrong.is_empty(), "env not applied: {env_wrong:?}");
    let bad: Vec<_> = outcomes
        .iter()
        .filter(|((_, outcome), _)| !outcome.starts_with("Succeeded"))
        .collect();
    assert!(bad.is_empty(), "requests that did not succeed: {bad:?}");
    node.stop().await;
}

/// Takes the requests that have reached a final phase out of `pending`, noting each one's
/// outcome and its latency from creation (looked at every 100–200 ms, during the stream too).
fn take_finished(
    node: &Node,
    pending: &mut Vec<(Kind, String, Instant)>,
    latency: &mut HashMap<Kind, Vec<f64>>,
    outcomes: &mut HashMap<(Kind, String), usize>,
) {
    pending.retain(|(kind, name, created)| {
        let object = request_object(node, *kind, name);
        let outcome = match (kind, phase(&object)) {
            (Kind::Recreate, Some("Completed")) => {
                let states = object
                    .pointer("/status/containerRecreateStates")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let all = states.iter().all(|s| s["phase"] == "Succeeded");
                if all && !states.is_empty() {
                    "Succeeded".to_string()
                } else {
                    format!(
                        "Completed: {} {:?}",
                        object["status"]["message"],
                        states.iter().map(|s| &s["phase"]).collect::<Vec<_>>()
                    )
                }
            }
            (Kind::Resize, Some(p @ ("Succeeded" | "Failed" | "Infeasible"))) => {
                format!("{p} {}", object["status"]["message"])
            }
            (Kind::Restart, Some("Succeeded")) => "Succeeded".to_string(),
            (Kind::Restart, Some("Failed")) => format!("Failed {}", object["status"]["message"]),
            _ => return true,
        };
        latency
            .entry(*kind)
            .or_default()
            .push(created.elapsed().as_secs_f64() * 1e3);
        *outcomes.entry((*kind, outcome)).or_default() += 1;
        false
    });
}

/// The request object behind a pending operation.
fn request_object(node: &Node, kind: Kind, name: &str) -> Value {
    match kind {
        Kind::Recreate => node.crr(name),
        Kind::Resize => node.resize_request(name),
        Kind::Restart => node
            .server
            .store()
            .get("containerrestartrequests", NS, name)
            .unwrap_or_default(),
        Kind::EnvChange => Value::Null,
    }
}

/// The agent's RSS, written down every [`RSS_SAMPLE`].
struct RssCurve {
    pid: u32,
    last: Option<Instant>,
    kib: Vec<u64>,
}

impl RssCurve {
    fn new(pid: u32) -> RssCurve {
        RssCurve {
            pid,
            last: None,
            kib: Vec::new(),
        }
    }

    fn sample(&mut self) {
        if self.last.is_none_or(|at| at.elapsed() >= RSS_SAMPLE) {
            self.last = Some(Instant::now());
            self.kib.push(usage(self.pid).0);
        }
    }

    fn describe(&self) -> String {
        let mib: Vec<String> = self
            .kib
            .iter()
            .map(|kib| format!("{:.1}", *kib as f64 / 1024.0))
            .collect();
        mib.join(" ")
    }
}
