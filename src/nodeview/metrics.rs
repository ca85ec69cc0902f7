//! `inplaced_node_view_refreshes_total{result}`: refreshes of the view from the runtime.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use crate::metrics::{FamilySet, ResultLabels, registered};

#[derive(Clone)]
pub(crate) struct RefreshMetrics {
    refreshes: Family<ResultLabels, Counter>,
}

impl FamilySet for RefreshMetrics {
    fn register(registry: &mut Registry) -> Self {
        let refreshes: Family<ResultLabels, Counter> = registered(
            registry,
            "node_view_refreshes",
            "Refreshes of the node view from the container runtime, by result",
            Family::default(),
        );
        // Both outcomes exist at 0 from the start (a first error is an increase alerts see).
        for result in ["success", "error"] {
            drop(refreshes.get_or_create(&ResultLabels { result }));
        }
        Self { refreshes }
    }
}

impl RefreshMetrics {
    pub(crate) fn count(&self, ok: bool) {
        let result = if ok { "success" } else { "error" };
        self.refreshes.get_or_create(&ResultLabels { result }).inc();
    }
}
