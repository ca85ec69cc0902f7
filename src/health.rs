//! The agent's health: whether its main loop is alive (`/healthz`, the systemd watchdog) and
//! why it is not ready, per dependency (`/readyz`, systemd's STATUS=). The watches, the
//! controllers and the agent report into it; the HTTP endpoints and the status line read it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The main loop beats at least this often; a longer silence means it is stuck.
pub(crate) const STALL_AFTER: Duration = Duration::from_secs(30);

/// Why the agent is not ready, per dependency; empty = ready.
#[derive(Clone, Debug)]
pub struct Health {
    heartbeat: Heartbeat,
    reasons: Arc<Mutex<BTreeMap<&'static str, String>>>,
    /// Ticks on every change, so that STATUS= follows readiness without waiting for a poll.
    changes: Arc<tokio::sync::watch::Sender<u64>>,
    /// The long-lived workers that report progress, by name.
    workers: Arc<Mutex<BTreeMap<&'static str, Worker>>>,
    /// How long a worker may go without progress before it counts as stuck.
    stuck_after: Duration,
}

/// The default of `stuck-worker-after`: a request loop turns every second when idle, and every
/// call it awaits has a deadline well below this (the API's answer deadline, the CRI's).
pub(crate) const STUCK_WORKER_AFTER: Duration = Duration::from_secs(60);

/// One long-lived worker's last sign of progress, and how long it may go without one.
#[derive(Clone, Copy, Debug)]
struct Worker {
    last: Instant,
    stuck_after: Duration,
}

/// A worker's handle on its entry in [`Health`]: `beat` at every turn of its loop (a pass, or
/// waking up idle). Dropped when the worker ends, it takes the entry away.
pub struct WorkerBeat {
    name: &'static str,
    workers: Arc<Mutex<BTreeMap<&'static str, Worker>>>,
}

impl WorkerBeat {
    pub fn name(&self) -> &'static str {
        self.name
    }

    pub fn beat(&self) {
        if let Ok(mut workers) = self.workers.lock()
            && let Some(worker) = workers.get_mut(self.name)
        {
            worker.last = Instant::now();
        }
    }
}

impl Drop for WorkerBeat {
    fn drop(&mut self) {
        if let Ok(mut workers) = self.workers.lock() {
            workers.remove(self.name);
        }
    }
}

impl Health {
    pub fn new(heartbeat: Heartbeat) -> Self {
        Self {
            heartbeat,
            reasons: Arc::default(),
            changes: Arc::new(tokio::sync::watch::Sender::new(0)),
            workers: Arc::default(),
            stuck_after: STUCK_WORKER_AFTER,
        }
    }

    /// With another bound for workers (`stuck-worker-after`).
    pub fn with_stuck_worker_after(mut self, stuck_after: Duration) -> Self {
        self.stuck_after = stuck_after;
        self
    }

    /// Registers a long-lived worker (a request loop, a controller) that makes progress at
    /// least every `stuck-worker-after` when it is not stuck: one that goes longer without a
    /// beat makes the agent not alive (`/healthz` fails, the systemd watchdog is no longer
    /// pinged, and systemd restarts the agent).
    /// `idles_up_to`: the longest the worker waits without work before it turns anyway; it
    /// is added to the bound.
    pub fn worker(&self, name: &'static str, idles_up_to: Duration) -> WorkerBeat {
        self.worker_within(name, self.stuck_after + idles_up_to)
    }

    fn worker_within(&self, name: &'static str, stuck_after: Duration) -> WorkerBeat {
        if let Ok(mut workers) = self.workers.lock() {
            workers.insert(
                name,
                Worker {
                    last: Instant::now(),
                    stuck_after,
                },
            );
        }
        WorkerBeat {
            name,
            workers: self.workers.clone(),
        }
    }

    /// A receiver that sees every change of the reasons.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Records the state of one dependency: `Err(reason)` makes the agent unready.
    /// The reason stays a `String`: it is data shown as-is in `/readyz` and STATUS=, the words
    /// of whichever watch, controller or client reports it (often another error's text).
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

    /// Whether the agent is alive: its main loop beat within [`STALL_AFTER`], and every
    /// registered worker within its own bound.
    pub fn alive(&self) -> Result<(), NotAlive> {
        match self.heartbeat.since_last_beat() {
            None => return Err(NotAlive::NotStarted),
            Some(since) if since > STALL_AFTER => {
                return Err(NotAlive::MainLoopStalled {
                    secs: since.as_secs(),
                });
            }
            Some(_) => {}
        }
        let workers = self
            .workers
            .lock()
            .map_err(|_| NotAlive::WorkerStatePoisoned)?;
        let stuck: Vec<StuckWorker> = workers
            .iter()
            .filter_map(|(&name, worker)| {
                let since = worker.last.elapsed();
                (since > worker.stuck_after).then_some(StuckWorker {
                    name,
                    secs: since.as_secs(),
                })
            })
            .collect();
        if stuck.is_empty() {
            Ok(())
        } else {
            Err(NotAlive::WorkersStuck { stuck })
        }
    }
}

/// Why the agent is not alive: `/healthz` answers with it, and the watchdog stops pinging.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotAlive {
    #[error("the main loop has not started")]
    NotStarted,
    #[error("the main loop made no progress for {secs}s")]
    MainLoopStalled { secs: u64 },
    #[error("internal: worker state poisoned")]
    WorkerStatePoisoned,
    /// Never empty: one entry per worker past its bound, in name order.
    #[error("{}", joined(stuck))]
    WorkersStuck { stuck: Vec<StuckWorker> },
}

/// A worker that went longer than its bound without a beat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StuckWorker {
    pub name: &'static str,
    pub secs: u64,
}

impl std::fmt::Display for StuckWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} made no progress for {}s", self.name, self.secs)
    }
}

/// The stuck workers as one line, `; ` between them.
fn joined(stuck: &[StuckWorker]) -> String {
    stuck
        .iter()
        .map(StuckWorker::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// A test-only fault switch, compiled only with the `test-support` feature (the tests' build;
/// never the packaged daemon): with `INPLACED_TEST_HANG_WORKER=<name>`, the worker of that name
/// awaits forever once it has work (`with_work`), as a call that never returns would leave it.
pub(crate) async fn hang_here_if_told(worker: &str, with_work: bool) {
    #[cfg(feature = "test-support")]
    if with_work && std::env::var("INPLACED_TEST_HANG_WORKER").is_ok_and(|w| w == worker) {
        tracing::warn!(
            worker,
            "test fault INPLACED_TEST_HANG_WORKER: this worker hangs now"
        );
        std::future::pending::<()>().await;
    }
    #[cfg(not(feature = "test-support"))]
    let _ = (worker, with_work);
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
    pub(crate) fn since_last_beat(&self) -> Option<Duration> {
        let last = self.last.load(Ordering::Relaxed);
        (last > 0).then(|| {
            self.origin
                .elapsed()
                .saturating_sub(Duration::from_millis(last - 1))
        })
    }

    pub(crate) fn mark(&self) -> u64 {
        self.last.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_stuck_past_its_bound_makes_the_agent_not_alive_until_it_beats_or_ends() {
        let heartbeat = Heartbeat::default();
        heartbeat.beat();
        let health = Health::new(heartbeat);
        let quick = health.worker_within("recreate", Duration::from_millis(50));
        let patient = health.worker("resize", Duration::from_secs(1));
        assert_eq!(health.alive(), Ok(()));
        std::thread::sleep(Duration::from_millis(80));
        patient.beat();
        let err = health.alive().expect_err("recreate is stuck").to_string();
        assert!(err.starts_with("recreate made no progress for"), "{err}");
        assert!(!err.contains("resize"), "{err}");
        quick.beat();
        assert_eq!(health.alive(), Ok(()));
        std::thread::sleep(Duration::from_millis(80));
        assert!(health.alive().is_err());
        drop(quick);
        assert_eq!(health.alive(), Ok(()), "a worker that ended is not stuck");
    }

    /// `/healthz` and the watchdog's log line show these words.
    #[test]
    fn not_alive_keeps_its_words() {
        let health = Health::new(Heartbeat::default());
        assert_eq!(
            health.alive().map_err(|e| e.to_string()),
            Err("the main loop has not started".to_string())
        );
        assert_eq!(
            NotAlive::MainLoopStalled { secs: 31 }.to_string(),
            "the main loop made no progress for 31s"
        );
        let stuck = NotAlive::WorkersStuck {
            stuck: vec![
                StuckWorker {
                    name: "recreate",
                    secs: 61,
                },
                StuckWorker {
                    name: "resize",
                    secs: 62,
                },
            ],
        };
        assert_eq!(
            stuck.to_string(),
            "recreate made no progress for 61s; resize made no progress for 62s"
        );
    }
}
