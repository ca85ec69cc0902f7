//! The kubelet's container restart back-off (CrashLoopBackOff), as `doBackOff` in
//! `kuberuntime_manager.go` and client-go's `flowcontrol.Backoff` do it (docs/kubelet-backoff.md):
//! per key `<pod>_<namespace>_<uid>_<container>_<hash>`, the first restart after an exit is free
//! and leaves a delay of `initial`; each further exit waits that delay from the instance's
//! `FinishedAt`, then doubles it up to `cap`; an entry whose container ran more than
//! `forget_after` (from the kubelet's last start to the exit) is forgotten. The exit code does not
//! matter. Written from the kubelet sources, independently of inplaced's prediction of it.
//!
//! When the kubelet looks again: the back-off reaches the pod worker as a sync error, and the
//! worker requeues the pod, unless an event of the pod (a container changing state, an update
//! of its spec or metadata) syncs it first; each sync that meets the back-off sets the requeue
//! anew (`sync.rs`). Up to 1.34 the requeue is `wait.Jitter(10 s, 0.5)`, 10–15 s. From 1.35
//! (kubernetes PR 133066) the error carries the wait's end and the requeue is for then, with
//! the same jitter: `wait.Jitter(left, 0.5)`, `left` the time to the wait's end capped at the
//! one-minute resync interval. Not modelled: a probe result changing, which also syncs the pod,
//! and the kubelet's 1 s sync tick (the stand-in looks every 200 ms).

use std::collections::HashMap;
use std::time::Duration;

/// The settings that change the back-off, where the release has them.
#[derive(Clone, Copy, Debug, Default)]
pub struct CrashLoopSettings {
    /// Feature gate `KubeletCrashLoopBackOffMax` (1.32+; default off, on from 1.35).
    pub max_gate: Option<bool>,
    /// Kubelet config `crashLoopBackOff.maxContainerRestartPeriod` (1–300 s, with that gate).
    pub max_container_restart_period: Option<Duration>,
    /// Feature gate `ReduceDefaultCrashLoopBackOffDecay` (1.33+, default off).
    pub reduce_decay_gate: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Rule {
    pub initial: Duration,
    pub cap: Duration,
    pub forget_after: Duration,
}

impl Rule {
    /// kubelet.go's `backOffPeriod` / `MaxContainerBackOff` and their 1.32+ settings.
    pub(super) fn new(minor: u32, s: &CrashLoopSettings) -> Rule {
        let (mut initial, mut cap) = (Duration::from_secs(10), Duration::from_secs(300));
        if minor >= 33 && s.reduce_decay_gate {
            (initial, cap) = (Duration::from_secs(1), Duration::from_secs(60));
        }
        if minor >= 32 && s.max_gate.unwrap_or(minor >= 35) {
            cap = s
                .max_container_restart_period
                .unwrap_or(Duration::from_secs(300))
                .clamp(Duration::from_secs(1), Duration::from_secs(300));
            initial = initial.min(cap);
        }
        // client-go's hasExpired: twice the cap up to 1.31, a fixed 600 s from 1.32.
        let forget_after = if minor <= 31 {
            cap * 2
        } else {
            Duration::from_secs(600)
        };
        Rule {
            initial,
            cap,
            forget_after,
        }
    }
}

/// One key's entry: the delay the next exit waits, and when it was last updated (the kubelet's
/// clock when it decided to start the container).
#[derive(Clone, Copy, Debug)]
struct Entry {
    delay: Duration,
    last_update_nanos: i64,
}

#[derive(Default)]
pub(super) struct Backoff {
    entries: HashMap<String, Entry>,
}

pub(super) fn nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

impl Backoff {
    fn live(&self, rule: &Rule, key: &str, finished_nanos: i64) -> Option<Entry> {
        self.entries
            .get(key)
            .copied()
            .filter(|e| finished_nanos - e.last_update_nanos <= nanos(rule.forget_after))
    }

    /// `IsInBackOffSince`: the delay still being waited, if the container may not start yet.
    pub(super) fn waiting(
        &self,
        rule: &Rule,
        key: &str,
        finished_nanos: i64,
        now_nanos: i64,
    ) -> Option<Duration> {
        self.live(rule, key, finished_nanos)
            .filter(|e| now_nanos - finished_nanos < nanos(e.delay))
            .map(|e| e.delay)
    }

    /// `Next`: the container starts now; the next exit waits longer.
    pub(super) fn next(&mut self, rule: &Rule, key: &str, finished_nanos: i64, now_nanos: i64) {
        let delay = match self.live(rule, key, finished_nanos) {
            Some(e) => (e.delay * 2).min(rule.cap),
            None => rule.initial,
        };
        self.entries.insert(
            key.to_owned(),
            Entry {
                delay,
                last_update_nanos: now_nanos,
            },
        );
    }
}

/// The pod worker's requeue of a pod whose sync met a back-off with `left` to wait:
/// `wait.Jitter(d, 0.5)`, d plus up to half again, d being 10 s up to 1.34 and `left` (at most
/// a minute) from 1.35. `jitter` pins where in that range (0.0–1.0), else it is random as in Go.
pub(super) fn requeue_after(minor: u32, left: Duration, jitter: Option<f64>) -> Duration {
    let fraction = jitter.unwrap_or_else(fastrand::f64).clamp(0.0, 1.0);
    let base = if minor <= 34 {
        Duration::from_secs(10)
    } else {
        left.min(Duration::from_secs(60))
    };
    base + (base / 2).mul_f64(fraction)
}

/// Go's `time.Duration.String()` for whole seconds: `10s`, `1m20s`, `5m0s`.
pub(super) fn go_duration(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, s % 3600 / 60, s % 60) {
        (0, 0, sec) => format!("{sec}s"),
        (0, min, sec) => format!("{min}m{sec}s"),
        (h, min, sec) => format!("{h}h{min}m{sec}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    #[test]
    fn waits_double_from_the_second_exit() {
        let rule = Rule::new(30, &CrashLoopSettings::default());
        let mut b = Backoff::default();
        let mut now = 0;
        let mut waits = Vec::new();
        for _ in 0..8 {
            let finished = now + S;
            let wait = b
                .waiting(&rule, "k", finished, finished)
                .unwrap_or_default();
            let start = finished + nanos(wait);
            assert!(b.waiting(&rule, "k", finished, start).is_none());
            b.next(&rule, "k", finished, start);
            waits.push(wait.as_secs());
            now = start;
        }
        assert_eq!(waits, [0, 10, 20, 40, 80, 160, 300, 300]);
        // A run of more than 600 s is forgotten: free again.
        assert_eq!(b.waiting(&rule, "k", now + 601 * S, now + 601 * S), None);
        assert_eq!(
            b.waiting(&rule, "k", now + 600 * S, now + 600 * S),
            Some(Duration::from_secs(300))
        );
    }

    #[test]
    fn a_pod_in_back_off_is_requeued_per_release() {
        let s = Duration::from_secs;
        let left = s(8);
        assert_eq!(requeue_after(34, left, Some(0.0)), s(10));
        assert_eq!(requeue_after(34, left, Some(1.0)), s(15));
        assert_eq!(
            requeue_after(26, left, Some(0.5)),
            Duration::from_millis(12_500)
        );
        assert_eq!(requeue_after(35, left, Some(0.0)), s(8));
        assert_eq!(requeue_after(35, left, Some(1.0)), s(12));
        assert_eq!(
            requeue_after(36, s(200), Some(0.0)),
            s(60),
            "the resync interval"
        );
        assert_eq!(requeue_after(36, Duration::ZERO, Some(1.0)), Duration::ZERO);
        for _ in 0..100 {
            let random = requeue_after(34, left, None);
            assert!((s(10)..=s(15)).contains(&random), "{random:?}");
            let random = requeue_after(35, left, None);
            assert!((s(8)..=s(12)).contains(&random), "{random:?}");
        }
    }

    #[test]
    fn settings_per_release() {
        let r = |minor, s| {
            let rule = Rule::new(minor, &s);
            (rule.initial.as_secs(), rule.cap.as_secs())
        };
        let reduced = CrashLoopSettings {
            reduce_decay_gate: true,
            ..Default::default()
        };
        assert_eq!(r(33, reduced), (1, 60));
        assert_eq!(r(32, reduced), (10, 300));
        let capped = CrashLoopSettings {
            max_container_restart_period: Some(Duration::from_secs(5)),
            ..Default::default()
        };
        assert_eq!(r(34, capped), (10, 300));
        assert_eq!(r(35, capped), (5, 5));
        assert_eq!(go_duration(Duration::from_secs(80)), "1m20s");
        assert_eq!(go_duration(Duration::from_secs(300)), "5m0s");
    }
}
