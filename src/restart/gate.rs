//! The stop gate: at most one stop per container across every restarter of the agent.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};

/// One stop per container across all of the agent's restarters (CRRs, env changes): a
/// container that one of them is stopping, or has stopped, is never stopped by another. Each
/// restarter checks the runtime before it kills, but two checks made at the same moment both
/// see the container running; the claim is what makes check-then-stop exclusive.
#[derive(Clone, Debug)]
pub struct StopGate(Arc<Mutex<GateState>>);

#[derive(Debug, Default)]
struct GateState {
    stopping: HashSet<String>,
    stopped: HashSet<String>,
    /// `stopped` in the order of insertion, to forget the oldest first.
    stopped_order: VecDeque<String>,
}

/// Stopped container IDs remembered: far more than a node runs, and a stopped container never
/// runs again (kubelet starts a new one), so forgetting the oldest is safe.
const REMEMBERED_STOPS: usize = 4096;

impl StopGate {
    /// The agent's one gate. Every restarter is handed this same gate (by clone): it is a
    /// required argument of each restarter's configuration, never made inside one.
    #[allow(clippy::new_without_default)] // a default would make a second gate too easy to write
    pub fn new() -> Self {
        StopGate(Arc::default())
    }

    /// The right to stop `container_id`, unless another kill holds it or already stopped it.
    /// Take it before confirming with the runtime that the container still runs.
    pub(crate) fn claim(&self, container_id: &str) -> Option<StopClaim> {
        let mut state = self.0.lock().ok()?;
        if state.stopped.contains(container_id) || !state.stopping.insert(container_id.to_owned()) {
            return None;
        }
        Some(StopClaim {
            gate: self.clone(),
            container_id: container_id.to_owned(),
            stopped: false,
        })
    }
}

/// Held for the length of one kill; released on drop. A claim whose stop succeeded marks the
/// container stopped for good.
#[derive(Debug)]
pub struct StopClaim {
    gate: StopGate,
    container_id: String,
    stopped: bool,
}

impl Drop for StopClaim {
    fn drop(&mut self) {
        let Ok(mut state) = self.gate.0.lock() else {
            return;
        };
        state.stopping.remove(&self.container_id);
        if self.stopped && state.stopped.insert(self.container_id.clone()) {
            state.stopped_order.push_back(self.container_id.clone());
            if state.stopped_order.len() > REMEMBERED_STOPS
                && let Some(oldest) = state.stopped_order.pop_front()
            {
                state.stopped.remove(&oldest);
            }
        }
    }
}

impl StopClaim {
    pub fn container_id(&self) -> &str {
        &self.container_id
    }

    /// The stop succeeded: no restarter may stop this container again.
    pub(super) fn mark_stopped(&mut self) {
        self.stopped = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_container_is_claimed_by_one_kill_at_a_time_and_never_after_its_stop() {
        let gate = StopGate::new();
        let first = gate.claim("a").expect("free");
        assert!(gate.claim("a").is_none(), "held by the first kill");
        assert!(
            gate.claim("b").is_some(),
            "other containers are independent"
        );
        drop(first);
        // A kill that did not stop the container (the runtime went away) leaves it claimable.
        let mut second = gate.claim("a").expect("released without a stop");
        second.mark_stopped();
        drop(second);
        assert!(gate.claim("a").is_none(), "stopped for good");
    }

    #[test]
    fn the_gate_forgets_only_the_oldest_stops() {
        let gate = StopGate::new();
        for n in 0..=REMEMBERED_STOPS {
            let mut claim = gate.claim(&n.to_string()).expect("free");
            claim.mark_stopped();
        }
        assert!(gate.claim("0").is_some(), "the oldest is forgotten");
        assert!(gate.claim("1").is_none());
        assert!(gate.claim(&REMEMBERED_STOPS.to_string()).is_none());
    }
}
