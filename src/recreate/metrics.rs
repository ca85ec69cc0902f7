//! `inplaced_crr_reaction_duration_seconds`: from a ContainerRecreateRequest's watch event to
//! its first kill.

use std::time::Duration;

use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::metrics::{FamilySet, registered};

#[derive(Clone)]
pub(crate) struct ReactionMetrics {
    reactions: Histogram,
}

impl FamilySet for ReactionMetrics {
    fn register(registry: &mut Registry) -> Self {
        Self {
            // 0.5 ms .. 16 s: the agent's own reaction is milliseconds, a busy node's much more.
            reactions: registered(
                registry,
                "crr_reaction_duration_seconds",
                "ContainerRecreateRequests from the agent's watch event to the first kill issued (target confirmed with the runtime, intent journalled)",
                Histogram::new(exponential_buckets(0.0005, 2.0, 16)),
            ),
        }
    }
}

impl ReactionMetrics {
    pub(crate) fn observe(&self, elapsed: Duration) {
        self.reactions.observe(elapsed.as_secs_f64());
    }
}
