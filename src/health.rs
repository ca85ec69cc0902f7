//! The agent's health: whether its main loop is alive (`/healthz`, the systemd watchdog) and
//! why it is not ready, per dependency (`/readyz`, systemd's STATUS=). The watches, the
//! controllers and the agent report into it; the HTTP endpoints and the status line read it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::systemd::Heartbeat;

/// The main loop beats at least this often; a longer silence means it is stuck.
pub(crate) const STALL_AFTER: Duration = Duration::from_secs(30);

/// Why the agent is not ready, per dependency; empty = ready.
#[derive(Clone, Debug)]
pub struct Health {
    heartbeat: Heartbeat,
    reasons: Arc<Mutex<BTreeMap<&'static str, String>>>,
    /// Ticks on every change, so that STATUS= follows readiness without waiting for a poll.
    changes: Arc<tokio::sync::watch::Sender<u64>>,
}

impl Health {
    pub fn new(heartbeat: Heartbeat) -> Self {
        Self {
            heartbeat,
            reasons: Arc::default(),
            changes: Arc::new(tokio::sync::watch::Sender::new(0)),
        }
    }

    /// A receiver that sees every change of the reasons.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Records the state of one dependency: `Err(reason)` makes the agent unready.
    pub fn set(&self, dependency: &'static str, state: Result<(), String>) {
        let changed = match self.reasons.lock() {
            Ok(mut reasons) => match state {
                Ok(()) => reasons.remove(dependency).is_some(),
                Err(reason) => reasons.insert(dependency, reason.clone()).as_ref() != Some(&reason),
            },
            Err(_) => false,
        };
        if changed {
            self.changes.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// The reasons for not being ready, one line each as `dependency: reason`.
    pub(crate) fn unready_reasons(&self) -> Vec<String> {
        self.reasons
            .lock()
            .map(|r| r.iter().map(|(k, v)| format!("{k}: {v}")).collect())
            .unwrap_or_else(|_| vec!["internal: health state poisoned".into()])
    }

    /// Whether the main loop is alive: it beat within [`STALL_AFTER`].
    pub fn alive(&self) -> Result<(), String> {
        match self.heartbeat.since_last_beat() {
            None => Err("the main loop has not started".into()),
            Some(since) if since > STALL_AFTER => Err(format!(
                "the main loop made no progress for {}s",
                since.as_secs()
            )),
            Some(_) => Ok(()),
        }
    }
}
