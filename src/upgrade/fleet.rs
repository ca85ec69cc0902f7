//! `inplaced upgrade-check --fleet --to 1.34 [--nodes SELECTOR]` (also `kubectl inplaced
//! upgrade-check`): every node's answer for one target, read from the NodeUpgradeChecks the
//! agents write, beside the nodes themselves, so that a node without an answer shows too.

use std::collections::BTreeMap;
use std::path::Path;

use ::kube::api::{Api, DynamicObject, ListParams};
use k8s_openapi::api::core::v1::Node;
use serde::Serialize;

use super::{NodeAnswer, TargetSummary};
use crate::hashing::KubeletVersion;

/// How the fleet's answer is printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FleetOutput {
    Table,
    /// The table, and the workloads that would see a restart.
    Wide,
    Json,
}

/// One node's line.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeLine {
    pub node: String,
    pub kubelet_version: Option<String>,
    /// The target's summary, when the node's agent computed it.
    pub summary: Option<TargetSummary>,
    /// Why there is no summary.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missing: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changed_at: Option<String>,
}

/// The fleet's answer for one target.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetAnswer {
    pub target: String,
    pub nodes: Vec<NodeLine>,
    pub restart: usize,
    pub keep: usize,
    pub unknown: usize,
    pub not_running: usize,
    pub nodes_with_checkpoint_hazard: usize,
    pub nodes_without_answer: usize,
}

/// Joins the nodes (with their kubelet versions) and the NodeUpgradeChecks for `target`.
pub fn answer(
    target: &KubeletVersion,
    nodes: &[(String, Option<String>)],
    checks: &BTreeMap<String, NodeAnswer>,
) -> FleetAnswer {
    let release = format!("1.{}", target.minor());
    let mut lines = Vec::new();
    for (node, kubelet_version) in nodes {
        let line = match checks.get(node) {
            None => NodeLine {
                node: node.clone(),
                kubelet_version: kubelet_version.clone(),
                summary: None,
                missing: Some("no NodeUpgradeCheck: no agent on the node, or it cannot write it (RBAC, CRD, admission policy)".into()),
                changed_at: None,
            },
            Some(check) => {
                let summary = check.targets.iter().find(|t| t.release == release).cloned();
                let missing = summary.is_none().then(|| {
                    let computed: Vec<&str> =
                        check.targets.iter().map(|t| t.release.as_str()).collect();
                    format!(
                        "not among this node's targets ({}): set upgrade-targets on its agent",
                        if computed.is_empty() { "none".to_owned() } else { computed.join(", ") }
                    )
                });
                NodeLine {
                    node: node.clone(),
                    kubelet_version: check.kubelet_version.clone().or(kubelet_version.clone()),
                    summary,
                    missing,
                    changed_at: Some(check.changed_at.clone()),
                }
            }
        };
        lines.push(line);
    }
    let sum = |f: fn(&TargetSummary) -> usize| {
        lines.iter().filter_map(|l| l.summary.as_ref()).map(f).sum()
    };
    FleetAnswer {
        target: release,
        restart: sum(|s| s.restart),
        keep: sum(|s| s.keep),
        unknown: sum(|s| s.unknown),
        not_running: sum(|s| s.not_running),
        nodes_with_checkpoint_hazard: lines
            .iter()
            .filter(|l| l.summary.as_ref().is_some_and(|s| s.checkpoint_hazard))
            .count(),
        nodes_without_answer: lines.iter().filter(|l| l.summary.is_none()).count(),
        nodes: lines,
    }
}

/// The answer as a table (with the workloads for `wide`), totals last.
pub fn table(answer: &FleetAnswer, wide: bool) -> String {
    let mut rows = vec![vec![
        "NODE".to_owned(),
        "KUBELET".into(),
        "RESTART".into(),
        "KEEP".into(),
        "UNKNOWN".into(),
        "NOT-RUNNING".into(),
        "CHECKPOINT".into(),
    ]];
    if wide {
        rows[0].push("WORKLOADS RESTARTED".into());
    }
    for line in &answer.nodes {
        let kubelet = line.kubelet_version.clone().unwrap_or_else(|| "?".into());
        let mut row = match &line.summary {
            Some(s) => vec![
                line.node.clone(),
                kubelet,
                s.restart.to_string(),
                s.keep.to_string(),
                s.unknown.to_string(),
                s.not_running.to_string(),
                if s.checkpoint_hazard {
                    "REFUSED".into()
                } else {
                    "ok".into()
                },
            ],
            None => vec![
                line.node.clone(),
                kubelet,
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
            ],
        };
        if wide {
            row.push(match &line.summary {
                Some(s) => workloads(s),
                None => line.missing.clone().unwrap_or_default(),
            });
        }
        rows.push(row);
    }
    let mut totals = vec![
        format!("TOTAL ({} nodes)", answer.nodes.len()),
        String::new(),
        answer.restart.to_string(),
        answer.keep.to_string(),
        answer.unknown.to_string(),
        answer.not_running.to_string(),
        format!("{} refused", answer.nodes_with_checkpoint_hazard),
    ];
    if wide {
        totals.push(String::new());
    }
    rows.push(totals);
    let mut out = format!("kubelet {}:\n", answer.target);
    out.push_str(&crate::table::aligned(&rows));
    if answer.nodes_without_answer > 0 {
        out.push_str(&format!(
            "{} node(s) without an answer for {} (-o wide says why)\n",
            answer.nodes_without_answer, answer.target
        ));
    }
    for line in &answer.nodes {
        if let Some(s) = line.summary.as_ref().filter(|s| s.checkpoint_hazard) {
            out.push_str(&format!(
                "{}: kubelet {} would not start: {}\n",
                line.node,
                answer.target,
                s.checkpoint_message
                    .as_deref()
                    .unwrap_or("a checkpoint file")
            ));
        }
    }
    out
}

fn workloads(summary: &TargetSummary) -> String {
    let mut names: Vec<String> = summary
        .workloads
        .iter()
        .map(|w| format!("{}/{}/{} ({})", w.namespace, w.kind, w.name, w.containers))
        .collect();
    if summary.workloads_omitted > 0 {
        names.push(format!("and {} more", summary.workloads_omitted));
    }
    if names.is_empty() {
        "-".into()
    } else {
        names.join(", ")
    }
}

/// Reads the nodes (matching `selector`) and every NodeUpgradeCheck, and prints the answer.
pub async fn run(
    kubeconfig: Option<&Path>,
    to: &str,
    selector: Option<&str>,
    output: FleetOutput,
) -> anyhow::Result<()> {
    let target = KubeletVersion::parse(to)?;
    let client = crate::kube::command_client(kubeconfig).await?;
    let mut params = ListParams::default();
    if let Some(selector) = selector {
        params = params.labels(selector);
    }
    let nodes: Vec<(String, Option<String>)> = Api::<Node>::all(client.clone())
        .list(&params)
        .await?
        .items
        .into_iter()
        .map(|n| {
            let version = n
                .status
                .and_then(|s| s.node_info)
                .map(|i| i.kubelet_version);
            (n.metadata.name.unwrap_or_default(), version)
        })
        .collect();
    let checks_api: Api<DynamicObject> = Api::all_with(client, &super::resource());
    let mut checks = BTreeMap::new();
    for object in checks_api.list(&ListParams::default()).await?.items {
        let name = object.metadata.name.clone().unwrap_or_default();
        let status = object.data.get("status").cloned().unwrap_or_default();
        match serde_json::from_value::<NodeAnswer>(status) {
            Ok(answer) => {
                checks.insert(name, answer);
            }
            Err(err) => eprintln!("warning: NodeUpgradeCheck {name} cannot be read: {err}"),
        }
    }
    let mut nodes = nodes;
    nodes.sort();
    let answer = answer(&target, &nodes, &checks);
    match output {
        FleetOutput::Json => println!("{}", serde_json::to_string_pretty(&answer)?),
        FleetOutput::Table => print!("{}", table(&answer, false)),
        FleetOutput::Wide => print!("{}", table(&answer, true)),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upgrade::Workload;

    fn summary(release: &str, restart: usize, hazard: bool) -> TargetSummary {
        TargetSummary {
            release: release.into(),
            restart,
            keep: 2,
            unknown: 0,
            not_running: 1,
            checkpoint_hazard: hazard,
            checkpoint_message: hazard.then(|| "allocated_pods_state: refused".into()),
            workloads: vec![Workload {
                namespace: "shop".into(),
                kind: "ReplicaSet".into(),
                name: "web-5d9".into(),
                containers: restart,
            }],
            workloads_omitted: 0,
        }
    }

    #[test]
    fn nodes_without_an_answer_or_without_the_target_are_shown_and_totals_add_up() {
        let nodes = vec![
            ("a".to_owned(), Some("v1.32.4".to_owned())),
            ("b".to_owned(), Some("v1.32.4".to_owned())),
            ("c".to_owned(), Some("v1.33.1".to_owned())),
            ("d".to_owned(), None),
        ];
        let answer_of = |targets| NodeAnswer {
            kubelet_version: Some("v1.32.4".into()),
            changed_at: "2026-11-29T00:00:00Z".into(),
            targets,
        };
        let checks = BTreeMap::from([
            (
                "a".to_owned(),
                answer_of(vec![summary("1.33", 3, false), summary("1.34", 4, true)]),
            ),
            ("b".to_owned(), answer_of(vec![summary("1.34", 1, false)])),
            ("c".to_owned(), answer_of(vec![summary("1.35", 9, false)])),
        ]);
        let target = KubeletVersion::parse("1.34").expect("release");
        let answer = answer(&target, &nodes, &checks);
        assert_eq!(answer.target, "1.34");
        assert_eq!((answer.restart, answer.keep, answer.not_running), (5, 4, 2));
        assert_eq!(answer.nodes_with_checkpoint_hazard, 1);
        assert_eq!(answer.nodes_without_answer, 2);
        let c = &answer.nodes[2];
        assert!(c.missing.as_deref().is_some_and(|m| m.contains("1.35")));
        assert!(
            answer.nodes[3]
                .missing
                .as_deref()
                .is_some_and(|m| m.contains("no NodeUpgradeCheck"))
        );

        let text = table(&answer, true);
        assert!(text.contains("shop/ReplicaSet/web-5d9 (4)"), "{text}");
        assert!(
            text.contains("a: kubelet 1.34 would not start: allocated_pods_state: refused"),
            "{text}"
        );
        assert!(text.contains("TOTAL (4 nodes)"), "{text}");
        let plain = table(&answer, false);
        assert!(!plain.contains("web-5d9"), "{plain}");
    }
}
