//! Before a node-pool upgrade: what each upgrade target's kubelet would do on this node (the
//! containers it would restart, keep or cannot tell; whether a checkpoint file would stop it),
//! recomputed when the node's pods or containers change, exported as metrics and written to the
//! node's NodeUpgradeCheck for `inplaced upgrade-check --fleet` (`fleet`) to read.

pub mod fleet;
mod metrics;
mod publish;
mod summary;

use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::watch;

use crate::hashing::KubeletVersion;
use crate::metrics::Metrics;
use crate::nodeview::NodeView;
pub(crate) use metrics::UpgradeMetrics;
pub use publish::{MIN_WRITE_INTERVAL, resource, run as run_publisher};
pub use summary::{
    MAX_WORKLOADS, TargetSummary, Workload, default_targets, fingerprint, summarize,
};

/// This node's answer: the kubelet it runs and each target's summary.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeAnswer {
    pub kubelet_version: Option<String>,
    /// When the answer last changed (RFC 3339).
    pub changed_at: String,
    pub targets: Vec<TargetSummary>,
}

impl NodeAnswer {
    /// The object's `status`.
    pub fn status(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// A status as compared for a change: without `changedAt`.
    fn comparable(status: &Value) -> Value {
        let mut status = status.clone();
        if let Some(fields) = status.as_object_mut() {
            fields.remove("changedAt");
        }
        status
    }
}

/// Follows the node view: recomputes the answer when what it depends on changed, sets the
/// metrics, and hands a changed answer to the publisher.
pub(crate) struct UpgradeWatch {
    configured: Vec<KubeletVersion>,
    kubelet_root_dir: PathBuf,
    metrics: UpgradeMetrics,
    fingerprint: Option<u64>,
    answers: watch::Sender<Option<Arc<NodeAnswer>>>,
}

impl UpgradeWatch {
    /// `configured` empty: the next two minors after the node's kubelet. The receiver is the
    /// publisher's.
    pub fn new(
        configured: Vec<KubeletVersion>,
        kubelet_root_dir: PathBuf,
        metrics: Metrics,
    ) -> (UpgradeWatch, watch::Receiver<Option<Arc<NodeAnswer>>>) {
        let (answers, receiver) = watch::channel(None);
        let upgrade_watch = UpgradeWatch {
            configured,
            kubelet_root_dir,
            metrics: metrics.families(),
            fingerprint: None,
            answers,
        };
        (upgrade_watch, receiver)
    }

    /// Looks at a new node view; a view not synced yet (pods or containers not listed) says
    /// nothing.
    pub fn observe(&mut self, view: &NodeView) {
        if !view.synced {
            return;
        }
        let targets = if self.configured.is_empty() {
            default_targets(view.kubelet_version.as_deref())
        } else {
            self.configured.clone()
        };
        let fingerprint = fingerprint(view, &targets, &self.kubelet_root_dir);
        if self.fingerprint == Some(fingerprint) {
            return;
        }
        self.fingerprint = Some(fingerprint);
        let summaries = summarize(view, &targets, &self.kubelet_root_dir);
        self.metrics.set_summaries(&summaries);
        let unchanged = self.answers.borrow().as_ref().is_some_and(|previous| {
            previous.targets == summaries && previous.kubelet_version == view.kubelet_version
        });
        if !unchanged {
            self.answers.send_replace(Some(Arc::new(NodeAnswer {
                kubelet_version: view.kubelet_version.clone(),
                changed_at: k8s_openapi::jiff::Timestamp::now().to_string(),
                targets: summaries,
            })));
        }
    }
}
