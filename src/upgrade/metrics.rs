//! `inplaced_upgrade_containers{target,verdict}` and `inplaced_upgrade_checkpoint_hazard{target}`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::TargetSummary;
use crate::metrics::{FamilySet, registered};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerdictLabels {
    target: String,
    verdict: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TargetLabels {
    target: String,
}

#[derive(Clone)]
pub(crate) struct UpgradeMetrics {
    containers: Family<VerdictLabels, Gauge>,
    checkpoint_hazard: Family<TargetLabels, Gauge>,
}

impl FamilySet for UpgradeMetrics {
    fn register(registry: &mut Registry) -> Self {
        Self {
            containers: registered(
                registry,
                "upgrade_containers",
                "This node's containers by what the kubelet of an upgrade target release would do to them: restart (its hash differs), keep, unknown (cannot tell), not_running",
                Family::default(),
            ),
            checkpoint_hazard: registered(
                registry,
                "upgrade_checkpoint_hazard",
                "1 when a kubelet checkpoint file on this node would stop the kubelet of an upgrade target release from starting, else 0",
                Family::default(),
            ),
        }
    }
}

impl UpgradeMetrics {
    /// The upgrade targets' answers for this node, replacing the previous ones (a target no
    /// longer checked loses its series).
    pub(crate) fn set_summaries(&self, summaries: &[TargetSummary]) {
        self.containers.clear();
        self.checkpoint_hazard.clear();
        for summary in summaries {
            for (verdict, count) in [
                ("restart", summary.restart),
                ("keep", summary.keep),
                ("unknown", summary.unknown),
                ("not_running", summary.not_running),
            ] {
                self.containers
                    .get_or_create(&VerdictLabels {
                        target: summary.release.clone(),
                        verdict,
                    })
                    .set(i64::try_from(count).unwrap_or(i64::MAX));
            }
            self.checkpoint_hazard
                .get_or_create(&TargetLabels {
                    target: summary.release.clone(),
                })
                .set(i64::from(summary.checkpoint_hazard));
        }
    }
}
