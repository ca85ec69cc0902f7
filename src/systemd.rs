//! systemd integration: `READY=1` once the agent itself serves (never gated on containerd or the
//! API server, so an outage of either at boot is a status, not a restart loop), `STATUS=` for the
//! dependencies' state, `WATCHDOG=1` only while the main loop makes progress, `STOPPING=1`.
//!
//! Without `NOTIFY_SOCKET` (not started by systemd) every call is a no-op.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sd_notify::NotifyState;

/// Sends notifications to the service manager; failures are logged, never fatal.
#[derive(Clone, Debug, Default)]
pub struct Notifier;

impl Notifier {
    pub fn ready(&self) {
        send(&[NotifyState::Ready]);
    }

    pub fn status(&self, text: &str) {
        send(&[NotifyState::Status(text)]);
    }

    pub fn stopping(&self) {
        send(&[NotifyState::Stopping]);
    }

    fn watchdog(&self) {
        send(&[NotifyState::Watchdog]);
    }
}

fn send(states: &[NotifyState]) {
    if let Err(err) = sd_notify::notify(states) {
        tracing::warn!(error = %err, "cannot notify systemd");
    }
}

/// The main loop's pulse: it beats on every turn; the watchdog and `/healthz` read it.
#[derive(Clone, Debug)]
pub struct Heartbeat {
    origin: Instant,
    /// Milliseconds since `origin` at the last beat, plus one (0 = never beat).
    last: Arc<AtomicU64>,
}

impl Default for Heartbeat {
    fn default() -> Self {
        Self {
            origin: Instant::now(),
            last: Arc::new(AtomicU64::new(0)),
        }
    }
}

impl Heartbeat {
    pub fn beat(&self) {
        let now = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX - 1) + 1;
        self.last.store(now, Ordering::Relaxed);
    }

    /// Time since the last beat; `None` before the first.
    pub fn since_last_beat(&self) -> Option<Duration> {
        let last = self.last.load(Ordering::Relaxed);
        (last > 0).then(|| {
            self.origin
                .elapsed()
                .saturating_sub(Duration::from_millis(last - 1))
        })
    }

    fn mark(&self) -> u64 {
        self.last.load(Ordering::Relaxed)
    }
}

/// The watchdog interval systemd asked for (`WATCHDOG_USEC`, for this PID), if any.
pub fn watchdog_interval() -> Option<Duration> {
    sd_notify::watchdog_enabled()
}

/// Pings the watchdog at half its interval, but only when the main loop has beaten since the
/// previous ping: a stuck loop stops the pings and systemd restarts the agent.
pub async fn run_watchdog(notifier: Notifier, heartbeat: Heartbeat, interval: Duration) {
    let mut ticker = tokio::time::interval(interval / 2);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut seen = 0;
    loop {
        ticker.tick().await;
        let mark = heartbeat.mark();
        if mark != seen {
            seen = mark;
            notifier.watchdog();
        } else {
            tracing::warn!("main loop made no progress since the last watchdog ping; not pinging");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeat_reports_time_since_last_beat() {
        let heartbeat = Heartbeat::default();
        assert_eq!(heartbeat.since_last_beat(), None);
        heartbeat.beat();
        let since = heartbeat.since_last_beat().unwrap();
        assert!(since < Duration::from_secs(5), "{since:?}");
    }
}
