//! `inplaced_resize_duration_seconds`, `inplaced_resizes_total` (by actuator and result) and
//! `inplaced_resize_reapplies_total`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::metrics::{FamilySet, long_histogram, registered};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResizeLabels {
    actuator: &'static str,
    result: &'static str,
}

#[derive(Clone)]
pub(crate) struct ResizeMetrics {
    durations: Family<ResizeLabels, Histogram>,
    ended: Family<ResizeLabels, Counter>,
    reapplies: Counter,
}

impl FamilySet for ResizeMetrics {
    fn register(registry: &mut Registry) -> Self {
        let set = Self {
            durations: registered(
                registry,
                "resize_duration_seconds",
                "ContainerResizeRequests from the agent taking one up to its final phase, by actuator (cri, kubelet) and result (Succeeded, Failed, Infeasible)",
                Family::new_with_constructor(long_histogram as fn() -> Histogram),
            ),
            ended: registered(
                registry,
                "resizes",
                "ContainerResizeRequests finished, by actuator and result",
                Family::default(),
            ),
            reapplies: registered(
                registry,
                "resize_reapplies",
                "cri resizes applied again because the kubelet replaced a resized container",
                Counter::default(),
            ),
        };
        // Every outcome exists at 0 from the start (a first failure is an increase alerts see).
        for actuator in ["cri", "kubelet"] {
            for result in ["Succeeded", "Failed", "Infeasible"] {
                drop(set.ended.get_or_create(&ResizeLabels { actuator, result }));
            }
        }
        drop(set.ended.get_or_create(&ResizeLabels {
            actuator: "none",
            result: "Failed",
        }));
        set
    }
}

impl ResizeMetrics {
    /// A resize request ended; `seconds` is unknown for requests that ended before this agent
    /// took them up (e.g. refused at once after a restart): counted, not timed.
    pub(crate) fn observe(
        &self,
        actuator: &'static str,
        result: &'static str,
        seconds: Option<f64>,
    ) {
        let labels = ResizeLabels { actuator, result };
        self.ended.get_or_create(&labels).inc();
        if let Some(seconds) = seconds {
            self.durations.get_or_create(&labels).observe(seconds);
        }
    }

    pub(crate) fn count_reapplied(&self) {
        self.reapplies.inc();
    }
}
