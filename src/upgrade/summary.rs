//! What each upgrade target would do to this node, in numbers: the containers its kubelet would
//! restart, keep, could not tell, and which are not running; whether a checkpoint file would
//! stop it; and the workloads (owner kind and name) that would see a restart. Pure: from the
//! node view and the checkpoint findings.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::checkpoints::{self, Finding, Verdict};
use crate::hashing::KubeletVersion;
use crate::nodeview::{self, NodeView};

/// At most this many workloads are named per target (the rest are counted), so that the
/// per-node object stays small on a node with hundreds of pods.
pub const MAX_WORKLOADS: usize = 20;
/// A checkpoint message is cut to this many characters.
const MAX_MESSAGE: usize = 300;

/// One upgrade target's answer for this node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TargetSummary {
    /// `1.34`
    pub release: String,
    pub restart: usize,
    pub keep: usize,
    pub unknown: usize,
    pub not_running: usize,
    /// A checkpoint file this release refuses: its kubelet would not start.
    pub checkpoint_hazard: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_message: Option<String>,
    /// The workloads that would see a restart, most containers first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workloads: Vec<Workload>,
    /// Workloads that would see a restart beyond [`MAX_WORKLOADS`].
    #[serde(default, skip_serializing_if = "is_zero")]
    pub workloads_omitted: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// A pod's controller (or the pod itself, for a pod without one).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Workload {
    pub namespace: String,
    pub kind: String,
    pub name: String,
    /// Its containers on this node that the target would restart.
    pub containers: usize,
}

/// The targets when none are configured: the next two minor releases after the node's kubelet.
pub fn default_targets(kubelet_version: Option<&str>) -> Vec<KubeletVersion> {
    let Some(current) = kubelet_version.and_then(|v| KubeletVersion::parse(v).ok()) else {
        return Vec::new();
    };
    (1..=2)
        .filter_map(|step| KubeletVersion::from_minor(current.minor() + step).ok())
        .collect()
}

/// A cheap digest of what the summaries depend on: the kubelet's release, every container's
/// identity, state, stored hash and spec, and the checkpoint files' stamps. Equal digests, equal
/// summaries: the agent recomputes only when it changes.
pub fn fingerprint(view: &NodeView, targets: &[KubeletVersion], root_dir: &Path) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    view.kubelet_version.hash(&mut hasher);
    for target in targets {
        target.to_string().hash(&mut hasher);
    }
    for pod in &view.pods {
        pod.uid.hash(&mut hasher);
        pod.static_pod.hash(&mut hasher);
        for container in &pod.containers {
            container.name.hash(&mut hasher);
            if let Some(runtime) = &container.runtime {
                runtime.container_id.hash(&mut hasher);
                runtime.state.hash(&mut hasher);
                runtime.stored_hash.hash(&mut hasher);
            }
            if let Some(spec) = pod.spec_of(container) {
                spec.json().hash(&mut hasher);
            }
        }
    }
    for stamp in checkpoints::stamps(root_dir) {
        stamp.hash(&mut hasher);
    }
    hasher.finish()
}

/// Every target's summary for the node in `view`, reading the checkpoint files in `root_dir`.
pub fn summarize(
    view: &NodeView,
    targets: &[KubeletVersion],
    root_dir: &Path,
) -> Vec<TargetSummary> {
    targets
        .iter()
        .map(|target| {
            let report = nodeview::upgrade_check(view, target);
            let findings = checkpoints::check(root_dir, target);
            summary_of(view, &report, &findings)
        })
        .collect()
}

fn summary_of(
    view: &NodeView,
    report: &nodeview::UpgradeReport,
    findings: &[Finding],
) -> TargetSummary {
    let refused = findings.iter().find(|f| f.verdict == Verdict::Refused);
    let pods: std::collections::HashMap<(&str, &str), &nodeview::PodView> = view
        .pods
        .iter()
        .map(|p| ((p.namespace.as_str(), p.name.as_str()), p))
        .collect();
    let mut per_workload: BTreeMap<(String, String, String), usize> = BTreeMap::new();
    for verdict in report.containers.iter().filter(|c| c.verdict == "restart") {
        let pod = pods
            .get(&(verdict.namespace.as_str(), verdict.pod.as_str()))
            .copied();
        let (kind, name) = pod
            .map(owner_of)
            .unwrap_or_else(|| ("Pod".to_owned(), verdict.pod.clone()));
        *per_workload
            .entry((verdict.namespace.clone(), kind, name))
            .or_default() += 1;
    }
    let mut workloads: Vec<Workload> = per_workload
        .into_iter()
        .map(|((namespace, kind, name), containers)| Workload {
            namespace,
            kind,
            name,
            containers,
        })
        .collect();
    // Most containers first; ties by name, so that the object does not change by itself.
    workloads.sort_by(|a, b| b.containers.cmp(&a.containers).then_with(|| a.cmp(b)));
    let workloads_omitted = workloads.len().saturating_sub(MAX_WORKLOADS);
    workloads.truncate(MAX_WORKLOADS);
    TargetSummary {
        release: format!("1.{}", minor_of(&report.to)),
        restart: report.restart,
        keep: report.keep,
        unknown: report.unknown,
        not_running: report.not_running,
        checkpoint_hazard: refused.is_some(),
        checkpoint_message: refused.map(|f| {
            let text = format!("{}: {}", f.file, f.message);
            text.chars().take(MAX_MESSAGE).collect()
        }),
        workloads,
        workloads_omitted,
    }
}

fn minor_of(release: &str) -> u32 {
    KubeletVersion::parse(release).map_or(0, |v| v.minor())
}

/// The controlling owner of a pod, as `kubectl get` names workloads; a ReplicaSet stands for
/// itself (its Deployment is not on the pod).
fn owner_of(pod: &nodeview::PodView) -> (String, String) {
    let controller = pod
        .api_pod
        .as_ref()
        .and_then(|p| p.metadata.owner_references.as_ref())
        .and_then(|owners| {
            owners
                .iter()
                .find(|o| o.controller == Some(true))
                .or(owners.first())
        });
    match controller {
        Some(owner) => (owner.kind.clone(), owner.name.clone()),
        None if pod.static_pod => ("StaticPod".to_owned(), pod.name.clone()),
        None => ("Pod".to_owned(), pod.name.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_targets_are_the_next_two_minors() {
        let minors = |v: Option<&str>| -> Vec<u32> {
            default_targets(v)
                .iter()
                .map(KubeletVersion::minor)
                .collect()
        };
        assert_eq!(minors(Some("v1.32.4")), [33, 34]);
        assert_eq!(minors(Some("v1.36.0-rc.1")), [37, 38]);
        assert_eq!(minors(None), Vec::<u32>::new());
        assert_eq!(minors(Some("garbage")), Vec::<u32>::new());
    }

    #[test]
    fn workloads_are_bounded_and_ordered() {
        let view = NodeView::default();
        let report = nodeview::UpgradeReport {
            to: "1.34".into(),
            node_kubelet_version: None,
            restart: 25,
            keep: 0,
            unknown: 0,
            not_running: 0,
            containers: (0..25)
                .map(|i| nodeview::UpgradeVerdict {
                    namespace: "ns".into(),
                    // Pod 0 has three containers to restart, the others one.
                    pod: format!("p{}", if i < 3 { 0 } else { i }),
                    container: format!("c{i}"),
                    container_id: String::new(),
                    stored_hash: None,
                    target_hash: None,
                    verdict: "restart".into(),
                    note: None,
                })
                .collect(),
            checkpoints: vec![],
        };
        let summary = summary_of(&view, &report, &[]);
        assert_eq!(summary.release, "1.34");
        assert_eq!(summary.workloads.len(), MAX_WORKLOADS);
        assert_eq!(summary.workloads_omitted, 23 - MAX_WORKLOADS);
        assert_eq!(summary.workloads[0].name, "p0");
        assert_eq!(summary.workloads[0].containers, 3);
        assert_eq!(summary.workloads[0].kind, "Pod");
        assert!(!summary.checkpoint_hazard);

        let refused = Finding {
            file: "/var/lib/kubelet/allocated_pods_state".into(),
            format: checkpoints::Format::Allocation,
            checksum_ok: Some(true),
            verdict: Verdict::Refused,
            message: "x".repeat(1000),
        };
        let summary = summary_of(&view, &report, &[refused]);
        assert!(summary.checkpoint_hazard);
        assert_eq!(
            summary.checkpoint_message.map(|m| m.chars().count()),
            Some(MAX_MESSAGE)
        );
    }
}
