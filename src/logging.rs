//! The agent's log: tracing to stderr (the journal under systemd), human or JSON, and a limit
//! on what a failure that loops can write. A warning or error of the same cause — the same
//! place in the code with the same words, numbers aside — is written at most once per
//! [`REPEAT_WINDOW`]: the first of a loop is written at once, its repeats once a minute.
//! (A count of what was held back cannot be written with the next one: tracing drops an event
//! logged from inside a filter.)

use std::collections::HashMap;
use std::fmt::Write as _;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Filter};
use tracing_subscriber::prelude::*;

use crate::config::LogFormat;

/// How often one cause may write a warning.
pub(crate) const REPEAT_WINDOW: Duration = Duration::from_secs(60);

/// Causes remembered at most; past that, those whose window has passed are forgotten.
const CAUSES_KEPT: usize = 4096;

/// Installs the global subscriber: `filter` as RUST_LOG reads it (`info` when it cannot be
/// read), warnings and errors through [`RepeatLimit`].
pub fn init(format: LogFormat, filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let registry = tracing_subscriber::registry().with(filter);
    match format {
        LogFormat::Human => registry
            .with(layer.with_filter(RepeatLimit::new(REPEAT_WINDOW)))
            .init(),
        LogFormat::Json => registry
            .with(layer.json().with_filter(RepeatLimit::new(REPEAT_WINDOW)))
            .init(),
    }
}

/// A per-layer filter that lets a warning or error of one cause through at most once per
/// window. Info and below pass untouched: they are the agent's record of what it did, not
/// of what keeps failing.
pub(crate) struct RepeatLimit {
    window: Duration,
    /// When each cause was last written.
    causes: Mutex<HashMap<u64, Instant>>,
}

/// What to do with one event of a cause.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Write,
    Suppress,
}

impl RepeatLimit {
    pub fn new(window: Duration) -> Self {
        RepeatLimit {
            window,
            causes: Mutex::new(HashMap::new()),
        }
    }

    /// The verdict for an event of `cause` at `now`.
    pub fn admit(&self, cause: u64, now: Instant) -> Verdict {
        let mut causes = self.causes.lock().unwrap_or_else(|e| e.into_inner());
        if causes.len() >= CAUSES_KEPT {
            let window = self.window;
            causes.retain(|_, written| now.saturating_duration_since(*written) < window);
        }
        match causes.get_mut(&cause) {
            Some(written) if now.saturating_duration_since(*written) < self.window => {
                Verdict::Suppress
            }
            Some(written) => {
                *written = now;
                Verdict::Write
            }
            None => {
                causes.insert(cause, now);
                Verdict::Write
            }
        }
    }
}

/// The cause of an event: where it was logged, and its fields with every digit dropped (a
/// count, a duration or a resourceVersion that changes from one failure to the next does not
/// make it another cause).
pub(crate) fn cause_of(event: &Event<'_>) -> u64 {
    struct Words(String);
    impl Visit for Words {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            let _ = write!(self.0, "{}={:?};", field.name(), value);
        }
    }
    let mut words = Words(String::new());
    event.record(&mut words);
    let mut hasher = DefaultHasher::new();
    event.metadata().callsite().hash(&mut hasher);
    for c in words.0.chars().filter(|c| !c.is_ascii_digit()) {
        c.hash(&mut hasher);
    }
    hasher.finish()
}

impl<S: Subscriber> Filter<S> for RepeatLimit {
    fn enabled(&self, _meta: &Metadata<'_>, _cx: &Context<'_, S>) -> bool {
        true
    }

    fn event_enabled(&self, event: &Event<'_>, _cx: &Context<'_, S>) -> bool {
        if *event.metadata().level() > Level::WARN {
            return true;
        }
        self.admit(cause_of(event), Instant::now()) == Verdict::Write
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::Arc;

    #[test]
    fn a_cause_writes_once_per_window() {
        let limit = RepeatLimit::new(Duration::from_secs(60));
        let start = Instant::now();
        assert_eq!(limit.admit(1, start), Verdict::Write);
        for s in 1..60 {
            assert_eq!(
                limit.admit(1, start + Duration::from_secs(s)),
                Verdict::Suppress
            );
        }
        assert_eq!(
            limit.admit(2, start + Duration::from_secs(30)),
            Verdict::Write
        );
        assert_eq!(
            limit.admit(1, start + Duration::from_secs(60)),
            Verdict::Write
        );
        assert_eq!(
            limit.admit(1, start + Duration::from_secs(61)),
            Verdict::Suppress
        );
        assert_eq!(
            limit.admit(1, start + Duration::from_secs(130)),
            Verdict::Write
        );
    }

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("captured").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Through a real subscriber: a loop of the same failure (its numbers changing) writes one
    /// line, another cause its own, and info lines are never limited.
    #[test]
    fn a_looping_warning_is_written_once_and_other_causes_and_info_are_not_held_back() {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::registry().with(
            tracing_subscriber::fmt::layer()
                .with_writer(move || writer.clone())
                .with_ansi(false)
                .with_filter(RepeatLimit::new(REPEAT_WINDOW)),
        );
        tracing::subscriber::with_default(subscriber, || {
            for attempt in 0..100 {
                tracing::warn!(
                    resource = "containerrecreaterequests",
                    attempt,
                    "watch failed"
                );
                tracing::info!(attempt, "a pass");
            }
            tracing::warn!(resource = "containerresizerequests", "watch failed");
            tracing::warn!("another cause");
        });
        let text = String::from_utf8(captured.0.lock().expect("captured").clone()).expect("utf-8");
        let lines = |needle: &str| text.lines().filter(|l| l.contains(needle)).count();
        assert_eq!(lines("resource=\"containerrecreaterequests\""), 1, "{text}");
        assert_eq!(lines("resource=\"containerresizerequests\""), 1, "{text}");
        assert_eq!(lines("another cause"), 1, "{text}");
        assert_eq!(lines("a pass"), 100, "{text}");
    }
}
