//! The kill ledger: the agent's own kills by container ID, so that the restart timing metrics
//! attribute the restart a kill causes to what triggered it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::nodeview::Trigger;

/// The agent's own kills, by container ID, so that the restart they cause is attributed.
#[derive(Clone, Debug, Default)]
pub struct KillLedger(Arc<Mutex<HashMap<String, (Trigger, Timestamp)>>>);

impl KillLedger {
    /// Notes that `container_id` is being stopped now for `trigger`.
    pub fn record(&self, container_id: &str, trigger: Trigger) {
        if let Ok(mut kills) = self.0.lock() {
            kills.insert(container_id.to_owned(), (trigger, Timestamp::now()));
        }
    }

    /// Notes a kill that began at `started` (an earlier run of the agent's, from its journal),
    /// unless one is noted already: the restart it causes keeps its first kill's time.
    pub(crate) fn remember(&self, container_id: &str, trigger: Trigger, started: Timestamp) {
        if let Ok(mut kills) = self.0.lock() {
            kills
                .entry(container_id.to_owned())
                .or_insert((trigger, started));
        }
    }

    /// The kill that ended `container_id`, once: the restart it caused is attributed to it.
    pub(crate) fn take(&self, container_id: &str) -> Option<(Trigger, Timestamp)> {
        self.0.lock().ok()?.remove(container_id)
    }

    pub(crate) fn forget_older_than(&self, age: Duration) {
        let cutoff =
            Timestamp::now() - k8s_openapi::jiff::SignedDuration::try_from(age).unwrap_or_default();
        if let Ok(mut kills) = self.0.lock() {
            kills.retain(|_, (_, at)| *at > cutoff);
        }
    }
}
