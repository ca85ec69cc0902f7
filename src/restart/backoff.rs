//! The kubelet's container restart back-off (CrashLoopBackOff), predicted. The kubelet treats a
//! container inplaced stopped like one that crashed: after the first free restart, each further
//! exit within ten minutes of the previous start waits 10 s, 20 s, 40 s … up to 5 min before the
//! kubelet starts the container again. The rule per release and setting, checked against the
//! kubelet and client-go sources, is in `docs/kubelet-backoff.md`; this module is that rule as
//! plain data and arithmetic, and a book of what the kubelet holds per container, rebuilt from
//! the restarts the agent sees.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::nodeview::RestartWindow;

/// The back-off one kubelet applies: its release's rule with its settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BackoffRule {
    /// The wait after the first exit that is not free.
    pub initial: Duration,
    /// The longest wait.
    pub cap: Duration,
    /// An entry is forgotten (the next restart is free again) when the container's last
    /// instance finished more than this long after the kubelet last started it.
    pub forget_after: Duration,
    /// When the kubelet's pod worker looks again at a pod held in back-off.
    pub requeue: Requeue,
}

/// When the kubelet looks again at a pod held in back-off: it starts the container at its first
/// look after the wait (or at an event of the pod that syncs it sooner).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Requeue {
    /// Up to 1.34 the back-off is a sync error like any other: the pod worker retries the pod
    /// `wait.Jitter(10 s, 0.5)` after each look.
    SyncErrorRetry,
    /// From 1.35 (kubernetes PR 133066) the error carries the wait's end, and the worker
    /// requeues the pod for then, jittered the same way: up to half the time that was left
    /// (itself at most the one-minute resync interval) later.
    UntilWaitEnds,
}

/// The kubelet settings that change the rule, where its release has them (None: unset, the
/// release's default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct BackoffSettings {
    /// Feature gate `KubeletCrashLoopBackOffMax` (1.32+; on by default from 1.35).
    pub max_gate: Option<bool>,
    /// `crashLoopBackOff.maxContainerRestartPeriod` of the kubelet config (with that gate).
    pub max_restart_period: Option<Duration>,
    /// Feature gate `ReduceDefaultCrashLoopBackOffDecay` (1.33+, off by default).
    pub reduce_decay_gate: Option<bool>,
}

impl BackoffSettings {
    /// The settings in the kubelet's config file (YAML or JSON): `featureGates` and
    /// `crashLoopBackOff.maxContainerRestartPeriod` (a Go duration). A file that cannot be read
    /// or parsed gives none: the release's defaults.
    pub(crate) fn from_kubelet_config(path: &std::path::Path) -> Self {
        let Some(config) = crate::kubelet_config::read(path) else {
            return BackoffSettings::default();
        };
        let gate = |name: &str| crate::kubelet_config::gate(&config, name);
        BackoffSettings {
            max_gate: gate("KubeletCrashLoopBackOffMax"),
            max_restart_period: config
                .pointer("/crashLoopBackOff/maxContainerRestartPeriod")
                .and_then(serde_json::Value::as_str)
                .and_then(|d| humantime::parse_duration(d).ok()),
            reduce_decay_gate: gate("ReduceDefaultCrashLoopBackOffDecay"),
        }
    }
}

const INITIAL: Duration = Duration::from_secs(10);
const CAP: Duration = Duration::from_secs(300);
const FORGET_AFTER: Duration = Duration::from_secs(600);
const REDUCED_INITIAL: Duration = Duration::from_secs(1);
const REDUCED_CAP: Duration = Duration::from_secs(60);
/// Up to 1.34: the pod worker's 10 s retry with 50 % jitter, and the 1 s sync tick that picks
/// the pod up when its retry is due.
const LATE_RETRY: Duration = Duration::from_secs(16);
/// The kubelet's sync tick: a requeued pod is picked up at the first tick after it is due.
const SYNC_TICK: Duration = Duration::from_secs(1);
/// The pod worker's resync interval (the kubelet's default `syncFrequency`): the longest it
/// requeues a pod for.
const RESYNC_INTERVAL: Duration = Duration::from_secs(60);

impl BackoffRule {
    /// The rule of kubelet 1.`minor` with `settings`; a gate the release does not have is
    /// ignored, as the kubelet refuses to start with an unknown gate.
    pub(crate) fn of_kubelet(minor: u32, settings: &BackoffSettings) -> Self {
        let mut rule = BackoffRule {
            initial: INITIAL,
            cap: CAP,
            // Up to 1.31 the kubelet forgot after twice the cap; from 1.32 after 600 s fixed.
            forget_after: FORGET_AFTER,
            requeue: if minor <= 34 {
                Requeue::SyncErrorRetry
            } else {
                Requeue::UntilWaitEnds
            },
        };
        if minor >= 33 && settings.reduce_decay_gate == Some(true) {
            rule.initial = REDUCED_INITIAL;
            rule.cap = REDUCED_CAP;
        }
        let max_gate = minor >= 32 && settings.max_gate.unwrap_or(minor >= 35);
        if max_gate {
            // The configured cap wins over the reduced decay's; unset, it is 300 s.
            rule.cap = settings
                .max_restart_period
                .map_or(CAP, |p| p.clamp(Duration::from_secs(1), CAP));
            rule.initial = rule.initial.min(rule.cap);
        }
        if minor <= 31 {
            rule.forget_after = 2 * rule.cap;
        }
        rule
    }

    /// How much later than the end of a `wait` the kubelet may start the container. From 1.35
    /// the worker met the back-off at the latest when it saw the exit, so at most `wait` was
    /// left (a minute, once capped by the resync interval), and the jitter adds up to half of
    /// that; the sync tick adds up to a second in both eras. A free restart is not held.
    pub(crate) fn late_by(&self, wait: Duration) -> Duration {
        if wait.is_zero() {
            return Duration::ZERO;
        }
        match self.requeue {
            Requeue::SyncErrorRetry => LATE_RETRY,
            Requeue::UntilWaitEnds => wait.min(RESYNC_INTERVAL) / 2 + SYNC_TICK,
        }
    }

    fn forgotten(&self, entry: &BackoffEntry, finished: Timestamp) -> bool {
        finished.duration_since(entry.last_start) > jiff_duration(self.forget_after)
    }

    /// When the entry is forgotten for an instance still running: a stop after that is free.
    pub(crate) fn forgotten_from(&self, entry: &BackoffEntry) -> Option<Timestamp> {
        entry
            .last_start
            .checked_add(jiff_duration(self.forget_after))
            .ok()
    }

    /// How long after `finished` (the newest instance's exit) the kubelet waits before it
    /// starts the container again, given the entry it keeps for it.
    pub(crate) fn wait(&self, entry: Option<&BackoffEntry>, finished: Timestamp) -> Duration {
        match entry {
            Some(entry) if !self.forgotten(entry, finished) => entry.delay,
            _ => Duration::ZERO,
        }
    }

    /// The entry the kubelet keeps after it started the container again at `started`, the
    /// previous instance having finished at `finished`: the first restart (or the first after
    /// a long run) sets the initial delay, each further one doubles it up to the cap.
    pub(crate) fn after_restart(
        &self,
        entry: Option<&BackoffEntry>,
        finished: Timestamp,
        started: Timestamp,
    ) -> BackoffEntry {
        let delay = match entry {
            Some(entry) if !self.forgotten(entry, finished) => (entry.delay * 2).min(self.cap),
            _ => self.initial,
        };
        BackoffEntry {
            delay,
            last_start: started,
        }
    }
}

impl RestartWindow {
    /// The window of an instance that finished at `finished` and waits `wait`.
    pub(crate) fn after(rule: &BackoffRule, finished: Timestamp, wait: Duration) -> Option<Self> {
        let earliest = finished.checked_add(jiff_duration(wait)).ok()?;
        let latest = earliest
            .checked_add(jiff_duration(rule.late_by(wait)))
            .ok()?;
        Some(RestartWindow { earliest, latest })
    }
}

fn jiff_duration(d: Duration) -> k8s_openapi::jiff::SignedDuration {
    k8s_openapi::jiff::SignedDuration::try_from(d).unwrap_or(k8s_openapi::jiff::SignedDuration::MAX)
}

/// What the kubelet keeps for one container (client-go's backoff entry).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BackoffEntry {
    /// The wait the next exit gets.
    pub delay: Duration,
    /// When the kubelet last started the container (the entry's last update).
    pub last_start: Timestamp,
}

/// The kubelet's key: the pod (UID), the container name and its hash, so that a new pod or a
/// changed container spec starts from nothing.
pub(crate) type BackoffKey = (String, String, String);

/// The entries the kubelet holds, as far as the agent saw the restarts that made them. The
/// agent's view starts when it does: restarts before that are unknown, so a container the
/// agent never saw restart counts as having no entry (the prediction may then be short).
#[derive(Debug, Default)]
pub(crate) struct BackoffBook {
    entries: HashMap<BackoffKey, BackoffEntry>,
}

impl BackoffBook {
    /// A restart seen: the instance that finished at `finished` was followed by one the kubelet
    /// started at `started`.
    pub(crate) fn restarted(
        &mut self,
        rule: &BackoffRule,
        key: BackoffKey,
        finished: Timestamp,
        started: Timestamp,
    ) -> Duration {
        let wait = rule.wait(self.entries.get(&key), finished);
        let next = rule.after_restart(self.entries.get(&key), finished, started);
        self.entries.insert(key, next);
        wait
    }

    /// How long the kubelet will wait before starting the container again after an exit at
    /// `finished`.
    pub(crate) fn wait(
        &self,
        rule: &BackoffRule,
        key: &BackoffKey,
        finished: Timestamp,
    ) -> Duration {
        rule.wait(self.entries.get(key), finished)
    }

    /// When the wait a stop of the running instance would meet drops to nothing (its entry is
    /// forgotten), if it is not nothing already.
    pub(crate) fn wait_ends(
        &self,
        rule: &BackoffRule,
        key: &BackoffKey,
        now: Timestamp,
    ) -> Option<Timestamp> {
        let entry = self.entries.get(key)?;
        rule.forgotten_from(entry).filter(|at| *at >= now)
    }

    /// Whether the agent saw a restart that made an entry for `key`.
    pub(crate) fn knows(&self, key: &BackoffKey) -> bool {
        self.entries.contains_key(key)
    }

    /// Forgets containers whose pod is gone (`live` holds pod UIDs).
    pub(crate) fn retain_pods(&mut self, live: &std::collections::HashSet<String>) {
        self.entries.retain(|(uid, _, _), _| live.contains(uid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).expect("valid")
    }

    fn key() -> BackoffKey {
        ("uid".into(), "app".into(), "hash".into())
    }

    /// Stopped right after each start: waits 0, 10, 20, 40, 80, 160, 300, 300 s (the
    /// kubelet's e2e test writes the cumulative 0, 0, 10, 30, 70, 150, 310 s).
    #[test]
    fn each_exit_doubles_the_wait_up_to_the_cap() {
        let rule = BackoffRule::of_kubelet(34, &BackoffSettings::default());
        let mut book = BackoffBook::default();
        let mut now = 0;
        let mut waits = Vec::new();
        for _ in 0..8 {
            let finished = at(now + 1);
            let wait = book.wait(&rule, &key(), finished);
            let started = at(now + 1 + wait.as_secs() as i64);
            assert_eq!(book.restarted(&rule, key(), finished, started), wait);
            waits.push(wait.as_secs());
            now += 1 + wait.as_secs() as i64;
        }
        assert_eq!(waits, [0, 10, 20, 40, 80, 160, 300, 300]);
    }

    #[test]
    fn a_running_instance_s_wait_ends_when_its_entry_would_be_forgotten() {
        let rule = BackoffRule::of_kubelet(33, &BackoffSettings::default());
        let mut book = BackoffBook::default();
        assert_eq!(
            book.wait_ends(&rule, &key(), at(0)),
            None,
            "no entry, no wait"
        );
        book.restarted(&rule, key(), at(0), at(1));
        assert_eq!(book.wait(&rule, &key(), at(601)), Duration::from_secs(10));
        assert_eq!(book.wait_ends(&rule, &key(), at(100)), Some(at(601)));
        assert_eq!(book.wait(&rule, &key(), at(602)), Duration::ZERO);
        assert_eq!(book.wait_ends(&rule, &key(), at(602)), None, "over already");
    }

    #[test]
    fn a_long_run_is_forgotten_and_the_next_restart_is_free() {
        let rule = BackoffRule::of_kubelet(35, &BackoffSettings::default());
        let mut book = BackoffBook::default();
        book.restarted(&rule, key(), at(0), at(1));
        book.restarted(&rule, key(), at(2), at(12));
        // Ran 600 s exactly: still remembered.
        assert_eq!(book.wait(&rule, &key(), at(612)), Duration::from_secs(20));
        // Ran longer: forgotten; the restart is free and the next exit waits 10 s again.
        assert_eq!(
            book.restarted(&rule, key(), at(613), at(614)),
            Duration::ZERO
        );
        assert_eq!(book.wait(&rule, &key(), at(615)), Duration::from_secs(10));
        // Another hash or another pod starts from nothing.
        let other = ("uid".into(), "app".into(), "other".into());
        assert_eq!(book.wait(&rule, &other, at(615)), Duration::ZERO);
        book.retain_pods(&Default::default());
        assert_eq!(book.wait(&rule, &key(), at(615)), Duration::ZERO);
    }

    #[test]
    fn rules_per_release_and_setting() {
        let default = BackoffSettings::default();
        let rule = |minor, settings: BackoffSettings| BackoffRule::of_kubelet(minor, &settings);
        let secs = |r: BackoffRule| {
            (
                r.initial.as_secs(),
                r.cap.as_secs(),
                r.forget_after.as_secs(),
            )
        };
        assert_eq!(secs(rule(26, default)), (10, 300, 600));
        assert_eq!(secs(rule(36, default)), (10, 300, 600));
        let short = BackoffSettings {
            max_restart_period: Some(Duration::from_secs(4)),
            ..default
        };
        // The cap setting needs the gate: off by default before 1.35, on from 1.35.
        assert_eq!(secs(rule(34, short)), (10, 300, 600));
        assert_eq!(secs(rule(35, short)), (4, 4, 600));
        let gated = BackoffSettings {
            max_gate: Some(true),
            ..short
        };
        assert_eq!(secs(rule(32, gated)), (4, 4, 600));
        assert_eq!(
            secs(rule(31, gated)),
            (10, 300, 600),
            "1.31 has no such gate"
        );
        let reduced = BackoffSettings {
            reduce_decay_gate: Some(true),
            ..default
        };
        assert_eq!(secs(rule(33, reduced)), (1, 60, 600));
        assert_eq!(
            secs(rule(32, reduced)),
            (10, 300, 600),
            "1.32 has no such gate"
        );
        // 1.35: the cap gate is on, an unset cap is 300 s and wins over the reduced 60 s.
        assert_eq!(secs(rule(35, reduced)), (1, 300, 600));
        let both = BackoffSettings {
            max_gate: Some(true),
            max_restart_period: Some(Duration::from_secs(30)),
            reduce_decay_gate: Some(true),
        };
        assert_eq!(secs(rule(33, both)), (1, 30, 600));
    }

    /// Up to 1.34 the kubelet looks at a pod held in back-off every 10–15 s (plus its 1 s
    /// tick), so it starts the container up to 16 s after the wait; from 1.35 up to half the
    /// wait (half a minute at most) and a tick after it ends.
    #[test]
    fn how_late_the_kubelet_may_start_it_per_release() {
        let default = BackoffSettings::default();
        let ms = Duration::from_millis;
        for (minor, wait, late) in [
            (26, 10, 16_000),
            (32, 300, 16_000),
            (34, 20, 16_000),
            (34, 0, 0),
            (35, 10, 6_000),
            (35, 1, 1_500),
            (36, 40, 21_000),
            (37, 300, 31_000),
            (35, 0, 0),
        ] {
            let rule = BackoffRule::of_kubelet(minor, &default);
            assert_eq!(
                rule.late_by(Duration::from_secs(wait)),
                ms(late),
                "1.{minor}, {wait} s"
            );
        }
        let old = BackoffRule::of_kubelet(34, &default);
        let window = RestartWindow::after(&old, at(0), Duration::from_secs(10)).expect("window");
        assert_eq!((window.earliest, window.latest), (at(10), at(26)));
        assert_eq!(
            window.to_string(),
            "between 2027-01-15T08:00:10Z and 2027-01-15T08:00:26Z"
        );
        let new = BackoffRule::of_kubelet(35, &default);
        let window = RestartWindow::after(&new, at(0), Duration::from_secs(10)).expect("window");
        assert_eq!(
            window.to_string(),
            "between 2027-01-15T08:00:10Z and 2027-01-15T08:00:16Z"
        );
        let free = RestartWindow::after(&new, at(0), Duration::ZERO).expect("window");
        assert_eq!(free.to_string(), "at 2027-01-15T08:00:00Z");
    }

    #[test]
    fn settings_from_the_kubelet_config_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config.yaml");
        std::fs::write(
            &path,
            "kind: KubeletConfiguration\nfeatureGates:\n  KubeletCrashLoopBackOffMax: true\n  ReduceDefaultCrashLoopBackOffDecay: false\ncrashLoopBackOff:\n  maxContainerRestartPeriod: 1m30s\n",
        )
        .expect("write");
        assert_eq!(
            BackoffSettings::from_kubelet_config(&path),
            BackoffSettings {
                max_gate: Some(true),
                max_restart_period: Some(Duration::from_secs(90)),
                reduce_decay_gate: Some(false),
            }
        );
        std::fs::write(&path, "{not yaml: [").expect("write");
        assert_eq!(
            BackoffSettings::from_kubelet_config(&path),
            BackoffSettings::default()
        );
        let missing = dir.path().join("missing");
        assert_eq!(
            BackoffSettings::from_kubelet_config(&missing),
            BackoffSettings::default()
        );
    }
}
