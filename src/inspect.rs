//! One-shot views for the operator commands when no agent runs: list the runtime and the API
//! once, join, and render.

use std::fmt::Write;

use ::kube::Api;
use ::kube::api::ListParams;
use k8s_openapi::api::core::v1::Node;

use crate::config::Config;
use crate::cri::{CriClient, CriConfig, CriEndpoint};
use crate::kube::CachedPod;
use crate::metrics::Metrics;
use crate::nodeview::{self, NodeView, RuntimeTracker, UpgradeReport};

/// The node view built here and now. The runtime must answer; the API is optional (without it
/// the view shows the runtime's sandboxes as unmatched, and says why on stderr).
pub async fn snapshot(config: &Config) -> anyhow::Result<NodeView> {
    let endpoint = CriEndpoint::resolve(config.cri_endpoint.as_deref())?;
    // One listing only: every container's times in it.
    let mut tracker = RuntimeTracker::new(CriClient::new(CriConfig::new(endpoint)))
        .with_status_budget(usize::MAX);
    let runtime = tracker.refresh().await?;
    let (pods, kubelet_version) = match api_pods(config).await {
        Ok(found) => found,
        Err(err) => {
            eprintln!("note: cannot list pods from the API ({err:#}); showing the runtime only");
            (Vec::new(), None)
        }
    };
    let pods: Vec<std::sync::Arc<_>> = pods.into_iter().map(std::sync::Arc::new).collect();
    let mut view = nodeview::join(&config.node_name, &pods, &runtime);
    view.kubelet_version = kubelet_version;
    view.synced = true;
    nodeview::annotate(&mut view, &mut nodeview::HashCache::default());
    Ok(view)
}

async fn api_pods(config: &Config) -> anyhow::Result<(Vec<CachedPod>, Option<String>)> {
    let health = crate::health::Health::new(crate::health::Heartbeat::default());
    let client = crate::kube::client(
        config.kubeconfig.as_deref(),
        Metrics::new(),
        health,
        config.api_limits(),
    )
    .await?;
    let pods: Api<CachedPod> = Api::all(client.clone());
    let list = pods
        .list(&ListParams::default().fields(&format!("spec.nodeName={}", config.node_name)))
        .await?;
    let nodes: Api<Node> = Api::all(client);
    let kubelet_version = nodes
        .get_opt(&config.node_name)
        .await
        .ok()
        .flatten()
        .and_then(|n| n.status?.node_info.map(|i| i.kubelet_version));
    Ok((list.items, kubelet_version))
}

/// A `crictl ps`-like table: one row per spec container, with the runtime's view of it.
pub fn table(view: &NodeView) -> String {
    let mut rows = vec![[
        "NAMESPACE/POD".to_string(),
        "CONTAINER".into(),
        "STATE".into(),
        "CONTAINER ID".into(),
        "RESTARTS".into(),
        "STORED HASH".into(),
        "WRITTEN BY".into(),
        "CURRENT".into(),
    ]];
    for pod in &view.pods {
        let pod_name = format!(
            "{}/{}{}",
            pod.namespace,
            pod.name,
            if pod.static_pod { " (static)" } else { "" }
        );
        for c in &pod.containers {
            let (state, id, restarts, hash) = match &c.runtime {
                Some(r) => (
                    format!("{:?}", r.state).to_lowercase(),
                    r.id.chars().take(13).collect(),
                    r.restart_count.map_or("?".into(), |n| n.to_string()),
                    r.stored_hash.clone().unwrap_or_else(|| "-".into()),
                ),
                None => ("absent".into(), "-".into(), "-".into(), "-".into()),
            };
            let (written_by, current) = match &c.hash_check {
                Some(check) if check.note.is_some() => ("?".to_string(), "?".to_string()),
                Some(check) if check.written_by.is_empty() => {
                    ("none (spec changed)".into(), yes_no(check.current))
                }
                Some(check) => (check.written_by.join(","), yes_no(check.current)),
                None => ("-".into(), "-".into()),
            };
            rows.push([
                pod_name.clone(),
                c.name.clone(),
                state,
                id,
                restarts,
                hash,
                written_by,
                current,
            ]);
        }
    }
    let mut out = crate::table::aligned(&rows);
    let backoffs: Vec<String> = view
        .pods
        .iter()
        .flat_map(|pod| {
            pod.containers.iter().filter_map(move |c| {
                let b = c.crash_backoff.as_ref()?;
                let what = match (b.restart_window(), b.late_by_seconds) {
                    _ if b.uncertain.is_some() => {
                        format!("not known: {}", b.uncertain.as_deref().unwrap_or_default())
                    }
                    (Some(window), _) => {
                        format!("in back-off: the kubelet starts it again {window}")
                    }
                    (None, 0) => format!(
                        "a stop now would wait {}s for the kubelet to start it again",
                        b.next_wait_seconds
                    ),
                    // The kubelet's look after the wait comes late (docs/kubelet-backoff.md).
                    (None, late) => format!(
                        "a stop now would wait {}s to {}s for the kubelet to start it again",
                        b.next_wait_seconds,
                        b.next_wait_seconds + late
                    ),
                };
                Some(format!(
                    "  {}/{} {}: {what}",
                    pod.namespace, pod.name, c.name
                ))
            })
        })
        .collect();
    if !backoffs.is_empty() {
        let _ = writeln!(
            out,
            "\nthe kubelet's crash back-off (predicted from the restarts seen; docs/kubelet-backoff.md):"
        );
        for line in backoffs {
            let _ = writeln!(out, "{line}");
        }
    }
    if !view.unmatched_sandboxes.is_empty() {
        let _ = writeln!(
            out,
            "\nsandboxes without an API pod on node {}:",
            view.node_name
        );
        for s in &view.unmatched_sandboxes {
            let _ = writeln!(
                out,
                "  {}/{} uid {} sandbox {}",
                s.namespace,
                s.name,
                s.uid,
                s.id.chars().take(13).collect::<String>()
            );
        }
    }
    out
}

fn yes_no(value: Option<bool>) -> String {
    match value {
        Some(true) => "yes".into(),
        Some(false) => "no".into(),
        None => "?".into(),
    }
}

/// The upgrade report as text: one line per container, the totals, then the kubelet's
/// checkpoint files.
pub fn upgrade_table(report: &UpgradeReport) -> String {
    let mut out = String::new();
    for c in &report.containers {
        let _ = writeln!(
            out,
            "{:<8} {}/{} {} (stored {}, kubelet {} computes {}){}",
            c.verdict,
            c.namespace,
            c.pod,
            c.container,
            c.stored_hash.as_deref().unwrap_or("-"),
            report.to,
            c.target_hash.as_deref().unwrap_or("-"),
            c.note
                .as_deref()
                .map(|n| format!(": {n}"))
                .unwrap_or_default()
        );
    }
    let _ = writeln!(
        out,
        "kubelet {}: {} would restart, {} keep running, {} unknown, {} not running",
        report.to, report.restart, report.keep, report.unknown, report.not_running
    );
    for finding in &report.checkpoints {
        let verdict = serde_json::to_value(finding.verdict)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "checkpoint {} ({verdict}): {}",
            finding.file, finding.message
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodeview::UnmatchedSandbox;

    #[test]
    fn sandbox_ids_are_cut_by_characters_not_bytes() {
        let view = NodeView {
            node_name: "n".into(),
            unmatched_sandboxes: vec![UnmatchedSandbox {
                // A runtime's id is not checked to be hex: 13 bytes would cut `é` in two.
                id: "abcdefghijklé-rest".into(),
                namespace: "ns".into(),
                name: "p".into(),
                uid: "u".into(),
                ready: true,
            }],
            ..Default::default()
        };
        assert!(table(&view).contains("sandbox abcdefghijklé\n"));
    }

    #[test]
    fn containers_in_the_kubelets_back_off_are_listed() {
        let container = |name: &str, backoff: serde_json::Value| {
            serde_json::json!({"name": name, "kind": "regular", "runtime": null,
                               "hash_check": null, "crash_backoff": backoff})
        };
        let view: NodeView = serde_json::from_value(serde_json::json!({
            "node_name": "n", "runtime": null, "kubelet_version": null,
            "unmatched_sandboxes": [],
            "pods": [{
                "namespace": "ns", "name": "p", "uid": "u", "runtime_uid": "u",
                "static_pod": false, "terminating": false, "pod_ip": null,
                "sandbox_id": null, "sandbox_ready": true,
                "containers": [
                    container("waits", serde_json::json!(
                        {"next_wait_seconds": 40, "until": "2026-11-28T08:00:20Z"})),
                    container("would", serde_json::json!({"next_wait_seconds": 20})),
                    container("late", serde_json::json!(
                        {"next_wait_seconds": 20, "late_by_seconds": 16})),
                    container("window", serde_json::json!(
                        {"next_wait_seconds": 40, "late_by_seconds": 16,
                         "until": "2026-11-28T08:00:20Z",
                         "until_latest": "2026-11-28T08:00:36Z"})),
                    container("free", serde_json::Value::Null),
                ]
            }]
        }))
        .expect("a node view");
        let text = table(&view);
        assert!(
            text.contains(
                "  ns/p waits: in back-off: the kubelet starts it again at 2026-11-28T08:00:20Z\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "  ns/p would: a stop now would wait 20s for the kubelet to start it again\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "  ns/p late: a stop now would wait 20s to 36s for the kubelet to start it again\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "  ns/p window: in back-off: the kubelet starts it again between \
                 2026-11-28T08:00:20Z and 2026-11-28T08:00:36Z\n"
            ),
            "{text}"
        );
        assert!(!text.contains("ns/p free:"), "{text}");
    }
}
