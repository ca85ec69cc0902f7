//! One in-place restart as the node view shows it (`inplaced pods`): what triggered it and how
//! long each phase took. Measured by `restart::RestartTracker`; kept here because the view is
//! what carries it.

use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::metrics::label_values;

label_values! {
    /// What killed the old container of a restart (the `trigger` label of the restart metrics).
    Trigger {
        Crr => "crr",
        RestartRequest => "restart-request",
        EnvChange => "env-change",
        KubeletUpdate => "kubelet-update",
        ContainerExit => "container-exit",
    }
}

// As the node view shows a restart (`inplaced pods -o json`): the label's spelling.
impl Serialize for Trigger {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Trigger {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Trigger::ALL
            .iter()
            .copied()
            .find(|t| t.as_str() == text)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown restart trigger {text:?}")))
    }
}

/// When the kubelet starts an exited container again: from the end of its crash back-off to
/// that plus how late its sync may come (`restart::backoff`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RestartWindow {
    pub earliest: Timestamp,
    pub latest: Timestamp,
}

impl std::fmt::Display for RestartWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.latest > self.earliest {
            write!(f, "between {} and {}", self.earliest, self.latest)
        } else {
            write!(f, "at {}", self.earliest)
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
    /// How much later than its wait the kubelet may start it: up to 16 s on kubelets up to
    /// 1.34, which look at a pod in back-off again only every 10–15 s; from 1.35 up to half
    /// the wait (at most 30 s) and a second, the jitter of the pod worker's requeue.
    #[serde(default)]
    pub late_by_seconds: u64,
    /// Exited and waiting out the back-off: when the kubelet starts it again at the earliest
    /// (RFC 3339).
    #[serde(default)]
    pub until: Option<String>,
    /// With `late_by_seconds`: when it starts it again at the latest.
    #[serde(default)]
    pub until_latest: Option<String>,
    /// Why the kubelet may not do as predicted: it restarted since (and forgot its back-off),
    /// or restarts before the agent started are not known. No time is given then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncertain: Option<String>,
}

impl CrashBackoffView {
    /// What a stop of the container now will meet, for the kill's event and log: empty when
    /// the kubelet restarts it at once.
    pub(crate) fn after_a_stop(backoff: Option<&CrashBackoffView>) -> String {
        match backoff {
            Some(b) if b.uncertain.is_some() => format!(
                "; the kubelet's crash back-off is not known ({})",
                b.uncertain.as_deref().unwrap_or_default()
            ),
            Some(b) if b.next_wait_seconds > 0 => format!(
                "; the kubelet will start it again after its crash back-off, in {} to {} s",
                b.next_wait_seconds,
                b.next_wait_seconds + b.late_by_seconds
            ),
            _ => String::new(),
        }
    }

    /// For an exited container, what a request's state says while the kubelet has not started
    /// it again: the back-off's window (fixed times, not a countdown: the status is written
    /// once), or why it is not known.
    pub(crate) fn held_message(&self) -> Option<String> {
        if let Some(reason) = &self.uncertain {
            return Some(format!(
                "waiting for the kubelet to start it again (its crash back-off is not known: {reason})"
            ));
        }
        self.restart_window()
            .map(|w| format!("the kubelet will start it again after its crash back-off, {w}"))
    }

    /// For an exited container still held: when the kubelet starts it again.
    pub(crate) fn restart_window(&self) -> Option<RestartWindow> {
        if self.uncertain.is_some() {
            return None;
        }
        let earliest = self.until.as_deref()?.parse().ok()?;
        let latest = match self.until_latest.as_deref() {
            Some(t) => t.parse().ok()?,
            None => earliest,
        };
        Some(RestartWindow { earliest, latest })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trigger_reads_back_as_written_and_an_unknown_one_is_refused() {
        for trigger in Trigger::ALL {
            let text = serde_json::to_string(trigger).unwrap();
            assert_eq!(text, format!("\"{}\"", trigger.as_str()));
            assert_eq!(serde_json::from_str::<Trigger>(&text).unwrap(), *trigger);
        }
        assert!(serde_json::from_str::<Trigger>("\"cron\"").is_err());
    }

    #[test]
    fn a_held_container_is_said_with_its_window_or_why_it_is_not_known() {
        let held = CrashBackoffView {
            next_wait_seconds: 20,
            late_by_seconds: 6,
            until: Some("2026-11-22T10:00:20Z".into()),
            until_latest: Some("2026-11-22T10:00:26Z".into()),
            uncertain: None,
        };
        assert_eq!(
            held.held_message().as_deref(),
            Some(
                "the kubelet will start it again after its crash back-off, between \
                 2026-11-22T10:00:20Z and 2026-11-22T10:00:26Z"
            )
        );
        let unknown = CrashBackoffView {
            uncertain: Some("the kubelet restarted at 2026-11-22T10:00:00Z".into()),
            ..held
        };
        assert_eq!(
            unknown.held_message().as_deref(),
            Some(
                "waiting for the kubelet to start it again (its crash back-off is not known: \
                 the kubelet restarted at 2026-11-22T10:00:00Z)"
            )
        );
        assert_eq!(CrashBackoffView::default().held_message(), None);
    }

    #[test]
    fn a_stop_names_the_wait_and_how_late_the_kubelet_may_be() {
        let mut b = CrashBackoffView {
            next_wait_seconds: 20,
            late_by_seconds: 11,
            ..Default::default()
        };
        assert_eq!(
            CrashBackoffView::after_a_stop(Some(&b)),
            "; the kubelet will start it again after its crash back-off, in 20 to 31 s"
        );
        b.late_by_seconds = 16;
        assert_eq!(
            CrashBackoffView::after_a_stop(Some(&b)),
            "; the kubelet will start it again after its crash back-off, in 20 to 36 s"
        );
        b.next_wait_seconds = 0;
        assert_eq!(CrashBackoffView::after_a_stop(Some(&b)), "");
        assert_eq!(CrashBackoffView::after_a_stop(None), "");
    }

    #[test]
    fn the_restart_window_is_read_back_from_the_view() {
        let mut b = CrashBackoffView {
            until: Some("2026-11-28T10:00:10Z".into()),
            ..Default::default()
        };
        assert_eq!(
            b.restart_window().map(|w| w.to_string()).as_deref(),
            Some("at 2026-11-28T10:00:10Z")
        );
        b.until_latest = Some("2026-11-28T10:00:26Z".into());
        assert_eq!(
            b.restart_window().map(|w| w.to_string()).as_deref(),
            Some("between 2026-11-28T10:00:10Z and 2026-11-28T10:00:26Z")
        );
        b.until = Some("garbage".into());
        assert_eq!(b.restart_window(), None);
    }
}
