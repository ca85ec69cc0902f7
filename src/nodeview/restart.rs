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
    pub ready_seconds: Option<f64>,
    pub total_seconds: Option<f64>,
}
