//! One in-place restart as the node view shows it (`inplaced pods`): what triggered it and how
//! long each phase took. Measured by `restart::RestartTracker`; kept here because the view is
//! what carries it.

use serde::{Deserialize, Serialize};

use crate::metrics::Trigger;

/// One restart as measured. Times are RFC 3339; durations in seconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RestartTiming {
    pub trigger: Option<Trigger>,
    pub old_container_id: String,
    pub new_container_id: String,
    pub kill_issued_at: Option<String>,
    pub exited_at: Option<String>,
    pub running_at: Option<String>,
    pub ready_at: Option<String>,
    pub stop_seconds: Option<f64>,
    pub restart_seconds: Option<f64>,
    /// The part of `restart_seconds` the kubelet spent in its crash back-off, as predicted from
    /// the restarts seen (`restart::backoff`); 0 for a free restart.
    #[serde(default)]
    pub backoff_seconds: Option<f64>,
    pub ready_seconds: Option<f64>,
    pub total_seconds: Option<f64>,
}

/// The kubelet's crash back-off for one container, as predicted (`restart::backoff`).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CrashBackoffView {
    /// Stopped now, the container would be started again by the kubelet after this long.
    pub next_wait_seconds: u64,
    /// Exited and waiting out the back-off: when the kubelet starts it again (RFC 3339).
    #[serde(default)]
    pub until: Option<String>,
}

impl CrashBackoffView {
    /// What a stop of the container now will meet, for the kill's event and log: empty when
    /// the kubelet restarts it at once.
    pub(crate) fn after_a_stop(backoff: Option<&CrashBackoffView>) -> String {
        match backoff.map(|b| b.next_wait_seconds) {
            Some(wait) if wait > 0 => format!(
                "; the kubelet will start it again after its crash back-off, about {wait} s"
            ),
            _ => String::new(),
        }
    }
}
