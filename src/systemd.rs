//! systemd integration: `READY=1` once the agent itself serves (never gated on containerd or the
//! API server, so an outage of either at boot is a status, not a restart loop), `STATUS=` for the
//! dependencies' state, `WATCHDOG=1` only while the main loop makes progress, `STOPPING=1`.
//!
//! Without `NOTIFY_SOCKET` (not started by systemd) every call is a no-op.

use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::time::Duration;

use sd_notify::NotifyState;

use crate::health::{Health, Heartbeat};

/// Notifications waiting for the sending thread; more are dropped (see [`Notifier`]).
const QUEUE: usize = 16;

/// One notification, owned so that it can wait in the queue.
#[derive(Debug)]
enum Note {
    Ready,
    Status(String),
    Stopping,
    Watchdog,
    /// Not a notification: answered once everything queued before it was delivered.
    Flush(tokio::sync::oneshot::Sender<()>),
}

/// Delivers one notification: through sd-notify to a socket path; to an abstract socket
/// (`@name`, as systemd before 240 names it, RHEL 7's 219 among them) by hand, because sd-notify
/// 0.5 connects `@name` as a file path and fails.
fn notify_to(socket: &std::ffi::OsStr, state: NotifyState) -> std::io::Result<()> {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::ffi::OsStrExt;
    match socket.as_bytes().split_first() {
        Some((b'@', name)) => {
            let address = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
            let message = format!("{state}\n");
            let sent = std::os::unix::net::UnixDatagram::unbound()?
                .send_to_addr(message.as_bytes(), &address)?;
            if sent == message.len() {
                Ok(())
            } else {
                Err(std::io::Error::new(
                    std::io::ErrorKind::WriteZero,
                    "incomplete notification",
                ))
            }
        }
        _ => sd_notify::notify(&[state]),
    }
}

/// Sends notifications to the service manager from a thread of its own; failures are logged,
/// never fatal. A datagram send blocks while the notify socket's queue is full (a manager that
/// does not read, or a test harness): that must never stall the agent, so the agent only
/// queues, and a notification that finds the queue full is dropped (a later STATUS= says the
/// same, a later WATCHDOG=1 pings again).
#[derive(Clone, Debug)]
pub struct Notifier {
    queue: Option<SyncSender<Note>>,
}

impl Notifier {
    /// Starts the sending thread when `NOTIFY_SOCKET` is set; otherwise every call is a no-op.
    pub fn start() -> Notifier {
        if std::env::var_os("NOTIFY_SOCKET").is_none() {
            return Notifier { queue: None };
        }
        Notifier::start_with(|note| {
            let state = match note {
                Note::Ready => NotifyState::Ready,
                Note::Status(text) => NotifyState::Status(text),
                Note::Stopping => NotifyState::Stopping,
                Note::Watchdog => NotifyState::Watchdog,
                Note::Flush(_) => return,
            };
            if let Some(socket) = std::env::var_os("NOTIFY_SOCKET")
                && let Err(err) = notify_to(&socket, state)
            {
                tracing::warn!(error = %err, "cannot notify systemd");
            }
        })
    }

    /// The sending thread, delivering each queued notification with `deliver`.
    fn start_with(mut deliver: impl FnMut(&Note) + Send + 'static) -> Notifier {
        let (queue, notes) = mpsc::sync_channel::<Note>(QUEUE);
        let spawned = std::thread::Builder::new()
            .name("sd-notify".into())
            .spawn(move || {
                for note in notes {
                    match note {
                        Note::Flush(done) => {
                            let _ = done.send(());
                        }
                        note => deliver(&note),
                    }
                }
            });
        match spawned {
            Ok(_) => Notifier { queue: Some(queue) },
            Err(err) => {
                tracing::warn!(error = %err, "cannot start the systemd notification thread; not notifying");
                Notifier { queue: None }
            }
        }
    }

    pub fn ready(&self) {
        self.send(Note::Ready);
    }

    pub fn status(&self, text: &str) {
        self.send(Note::Status(text.to_owned()));
    }

    pub fn stopping(&self) {
        self.send(Note::Stopping);
    }

    fn watchdog(&self) {
        self.send(Note::Watchdog);
    }

    /// Waits, at most `within`, until everything queued so far was handed to the service
    /// manager: the process is about to exit, and a queued `STOPPING=1` would die with it. A
    /// manager that does not read costs the exit `within`, never more.
    pub(crate) async fn flush(&self, within: Duration) {
        let Some(queue) = &self.queue else { return };
        let (done, delivered) = tokio::sync::oneshot::channel();
        if queue.try_send(Note::Flush(done)).is_err() {
            tracing::debug!("notification queue full at exit; not waiting for it");
            return;
        }
        if tokio::time::timeout(within, delivered).await.is_err() {
            tracing::warn!(
                ?within,
                "the service manager did not take the last notifications"
            );
        }
    }

    fn send(&self, note: Note) {
        let Some(queue) = &self.queue else { return };
        match queue.try_send(note) {
            Ok(()) => {}
            Err(TrySendError::Full(note)) => {
                tracing::debug!(
                    ?note,
                    "the service manager is not reading notifications; dropped"
                )
            }
            Err(TrySendError::Disconnected(_)) => {}
        }
    }
}

/// The watchdog interval systemd asked for (`WATCHDOG_USEC`, for this PID), if any.
pub(crate) fn watchdog_interval() -> Option<Duration> {
    sd_notify::watchdog_enabled()
}

/// Pings the watchdog at half its interval, but only when the main loop has beaten since the
/// previous ping: a stuck loop stops the pings and systemd restarts the agent.
pub async fn run_watchdog(
    notifier: Notifier,
    heartbeat: Heartbeat,
    health: Health,
    interval: Duration,
) {
    let mut ticker = tokio::time::interval(interval / 2);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut seen = 0;
    loop {
        ticker.tick().await;
        let mark = heartbeat.mark();
        if mark == seen {
            tracing::warn!("main loop made no progress since the last watchdog ping; not pinging");
            continue;
        }
        // A worker stuck past its bound stops the pings too: systemd restarts the agent.
        if let Err(stuck) = health.alive() {
            tracing::warn!(%stuck, "a worker is stuck; not pinging the watchdog");
            continue;
        }
        seen = mark;
        notifier.watchdog();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    #[test]
    fn notifications_reach_an_abstract_socket() {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("inplaced-test-notify-{}", std::process::id());
        let address = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let listener = std::os::unix::net::UnixDatagram::bind_addr(&address).unwrap();
        listener
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        notify_to(
            std::ffi::OsStr::new(&format!("@{name}")),
            NotifyState::Ready,
        )
        .unwrap();
        let mut buffer = [0u8; 64];
        let n = listener.recv(&mut buffer).unwrap();
        assert_eq!(&buffer[..n], b"READY=1\n");
    }

    /// A manager that never reads: the sending thread blocks for good (as a datagram send to a
    /// full notify socket does), yet no call of the agent's blocks, and what fits is delivered.
    #[test]
    fn a_manager_that_does_not_read_never_blocks_the_agent() {
        let (delivered_tx, delivered) = mpsc::channel::<String>();
        let (_release, blocked) = mpsc::channel::<()>();
        let notifier = Notifier::start_with(move |note| {
            let _ = delivered_tx.send(format!("{note:?}"));
            let _ = blocked.recv(); // never answered while the test runs
        });
        let started = Instant::now();
        for i in 0..1000 {
            notifier.status(&format!("status {i}"));
        }
        notifier.ready();
        assert!(started.elapsed() < Duration::from_secs(5));
        let first = delivered.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(first, r#"Status("status 0")"#);
    }

    /// What was queued before a flush is delivered when it returns (the agent exits right
    /// after: a `STOPPING=1` still queued would be lost); a manager that never reads costs the
    /// flush its bound and no more.
    #[tokio::test]
    async fn flush_waits_for_what_was_queued_within_its_bound() {
        let (delivered_tx, delivered) = mpsc::channel::<String>();
        let notifier = Notifier::start_with(move |note| {
            std::thread::sleep(Duration::from_millis(100));
            let _ = delivered_tx.send(format!("{note:?}"));
        });
        notifier.status("last");
        notifier.stopping();
        notifier.flush(Duration::from_secs(10)).await;
        let got: Vec<String> = delivered.try_iter().collect();
        assert_eq!(got, [r#"Status("last")"#, "Stopping"]);

        let (_release, blocked) = mpsc::channel::<()>();
        let stuck = Notifier::start_with(move |_| {
            let _ = blocked.recv(); // never answered while the test runs
        });
        stuck.stopping();
        let started = Instant::now();
        stuck.flush(Duration::from_millis(300)).await;
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(300), "{took:?}");
        assert!(took < Duration::from_secs(5), "{took:?}");
    }

    #[test]
    fn heartbeat_reports_time_since_last_beat() {
        let heartbeat = Heartbeat::default();
        assert_eq!(heartbeat.since_last_beat(), None);
        heartbeat.beat();
        let since = heartbeat.since_last_beat().unwrap();
        assert!(since < Duration::from_secs(5), "{since:?}");
    }
}
