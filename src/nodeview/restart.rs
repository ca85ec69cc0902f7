//! One in-place restart as the node view shows it (`inplaced pods`): what triggered it and how
//! long each phase took. Measured by `restart::RestartTracker`; kept here because the view is
//! what carries it, and every restarter names its trigger with [`Trigger`].

use serde::{Deserialize, Serialize};

/// What killed the old container of a restart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Trigger {
    Crr,
    EnvChange,
    KubeletUpdate,
    ContainerExit,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Crr => "crr",
            Trigger::EnvChange => "env-change",
            Trigger::KubeletUpdate => "kubelet-update",
            Trigger::ContainerExit => "container-exit",
        }
    }
}

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
