//! Status writes for the request objects the agent handles (ContainerRecreateRequests,
//! ContainerResizeRequests): a merge patch on the status subresource, off the caller's loop,
//! one write per object at a time, no rewrite of a status just written while the watch has not
//! delivered it back yet, and failed writes retried per object with exponential backoff (as
//! client-go's work queues do), so that an API outage neither floods the log nor spends the
//! agent's API rate on retries that watches need to recover.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use ::kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use serde::Serialize;
use tokio::sync::mpsc;

/// The object a status belongs to.
#[derive(Clone, Debug)]
pub struct ObjectRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// When set, the write applies to this version of the object only: where another writer
    /// shares the status, a status decided from an older version fails with a conflict
    /// instead of undoing a newer one, and the next pass decides again from the newer version.
    pub resource_version: Option<String>,
}

pub struct StatusWriter<S> {
    client: ::kube::Client,
    resource: ApiResource,
    kind: &'static str,
    /// Status fields a merge patch must clear explicitly when the new status lacks them.
    clear: &'static [&'static str],
    /// UID → the status last written, when, the resourceVersion it was written against and
    /// the one it landed as.
    written: HashMap<String, Written<S>>,
    /// UID → a resourceVersion a write was decided from and refused for (409): decisions from
    /// it would be refused too, so they wait for the watch to bring the newer version.
    outdated: HashMap<String, String>,
    /// UIDs with a write under way.
    writing: HashSet<String>,
    /// UID → failed attempts in a row and when the next may start.
    failing: HashMap<String, Backoff>,
    results_tx: mpsc::Sender<WriteResult<S>>,
    results: mpsc::Receiver<WriteResult<S>>,
}

/// A status write that landed.
struct Written<S> {
    status: S,
    at: Instant,
    /// The version the write was conditioned on, if it was.
    based_on: Option<String>,
    /// The version the object had after the write (unchanged when the write changed nothing).
    landed_as: Option<String>,
}

/// How a write ended.
enum WriteOutcome {
    /// It landed; the object's version after it.
    Landed(Option<String>),
    /// Refused with 409: the version it was decided from is no longer current.
    Outdated,
    Failed,
}

/// A finished write: the object's UID, the status, the version it was conditioned on, and
/// how it ended.
type WriteResult<S> = (String, S, Option<String>, WriteOutcome);

/// How long a written status is trusted over the (older) one the watch still shows.
const TRUST_WRITTEN: Duration = Duration::from_secs(5);

/// Failed writes of one object in a row, and when the next attempt may start.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Backoff {
    failures: u32,
    next_attempt: Instant,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(200);
    const MAX: Duration = Duration::from_secs(10);

    /// The state after one more failure at `now`: 200 ms, 400 ms, ... up to 10 s.
    fn after_failure(previous: Option<Backoff>, now: Instant) -> Backoff {
        let failures = previous.map_or(1, |b| b.failures.saturating_add(1));
        let delay = Self::FIRST
            .saturating_mul(1u32 << (failures - 1).min(16))
            .min(Self::MAX);
        Backoff {
            failures,
            next_attempt: now + delay,
        }
    }
}

impl<S: Serialize + PartialEq + Clone + Send + 'static> StatusWriter<S> {
    pub fn new(
        client: ::kube::Client,
        resource: ApiResource,
        kind: &'static str,
        clear: &'static [&'static str],
    ) -> Self {
        let (results_tx, results) = mpsc::channel(64);
        StatusWriter {
            client,
            resource,
            kind,
            clear,
            written: HashMap::new(),
            outdated: HashMap::new(),
            writing: HashSet::new(),
            failing: HashMap::new(),
            results_tx,
            results,
        }
    }

    /// Writes `status` unless the object (`current`) or our last write already says it. Merge
    /// patch carrying the object's resourceVersion when known: a status decided from an older
    /// version gets 409 and is decided again, never written over a newer one.
    pub fn write(&mut self, object: &ObjectRef, current: &S, status: S) {
        let last = self.written.get(&object.uid);
        let just_written =
            last.is_some_and(|w| w.status == status && w.at.elapsed() < TRUST_WRITTEN);
        // Decided again from the version a write of ours moved the object on from (the watch
        // has not brought that write back yet): the API server can only refuse it with 409. A
        // status carrying the time of the decision (completionTime) differs from the one just
        // written whenever a second has passed, so without this each completed request cost one
        // refused write. A write that changed nothing (a field the CRD's schema drops) left the
        // version as it was: decisions from it are still sent. A version a write was refused
        // for (409) is skipped the same way.
        let superseded = object.resource_version.is_some()
            && (last.is_some_and(|w| {
                w.based_on == object.resource_version && w.landed_as != w.based_on
            }) || self.outdated.get(&object.uid) == object.resource_version.as_ref());
        let backing_off = self
            .failing
            .get(&object.uid)
            .is_some_and(|b| Instant::now() < b.next_attempt);
        // One write per object at a time keeps them in order; the next pass writes again.
        if status == *current
            || just_written
            || superseded
            || backing_off
            || self.writing.contains(&object.uid)
        {
            return;
        }
        let mut patch = serde_json::json!({ "status": &status });
        if let Some(version) = &object.resource_version {
            patch["metadata"] = serde_json::json!({ "resourceVersion": version });
        }
        for key in self.clear {
            if patch["status"].get(key).is_none() {
                patch["status"][key] = serde_json::Value::Null;
            }
        }
        self.writing.insert(object.uid.clone());
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &object.namespace, &self.resource);
        let results = self.results_tx.clone();
        let object = object.clone();
        let kind = self.kind;
        let failures = self.failing.get(&object.uid).map_or(0, |b| b.failures);
        tokio::spawn(async move {
            let result = api
                .patch_status(&object.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await;
            match &result {
                // Decided from a version that is no longer current: the next pass decides again.
                Err(::kube::Error::Api(status)) if status.code == 409 => {
                    tracing::debug!(kind, name = %object.name, "status decided from an older version; deciding again")
                }
                // The first failure in a row is a warning; the retries that follow are debug.
                Err(err) if failures == 0 => {
                    tracing::warn!(kind, name = %object.name, namespace = %object.namespace, error = %err, "cannot write status; retrying with backoff")
                }
                Err(err) => {
                    tracing::debug!(kind, name = %object.name, failures, error = %err, "status write failed again")
                }
                Ok(_) if failures > 0 => {
                    tracing::info!(kind, name = %object.name, namespace = %object.namespace, failed_attempts = failures, "status written")
                }
                Ok(_) => {}
            }
            let outcome = match result {
                Ok(landed) => WriteOutcome::Landed(landed.metadata.resource_version),
                Err(::kube::Error::Api(status)) if status.code == 409 => WriteOutcome::Outdated,
                Err(_) => WriteOutcome::Failed,
            };
            let _ = results
                .send((object.uid, status, object.resource_version, outcome))
                .await;
        });
    }

    /// Waits for the next write to finish and records it (use in `select!`).
    pub async fn finished(&mut self) {
        if let Some((uid, status, based_on, outcome)) = self.results.recv().await {
            self.writing.remove(&uid);
            if let WriteOutcome::Landed(landed_as) = outcome {
                self.failing.remove(&uid);
                self.outdated.remove(&uid);
                let at = Instant::now();
                self.written.insert(
                    uid,
                    Written {
                        status,
                        at,
                        based_on,
                        landed_as,
                    },
                );
            } else {
                if let (WriteOutcome::Outdated, Some(version)) = (outcome, based_on) {
                    self.outdated.insert(uid.clone(), version);
                }
                let previous = self.failing.get(&uid).copied();
                self.failing
                    .insert(uid, Backoff::after_failure(previous, Instant::now()));
            }
        }
    }

    /// Forgets objects no longer watched.
    pub fn retain(&mut self, live: &HashSet<String>) {
        self.written.retain(|uid, _| live.contains(uid));
        self.outdated.retain(|uid, _| live.contains(uid));
        self.failing.retain(|uid, _| live.contains(uid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_200_ms_and_stops_at_10_s() {
        let now = Instant::now();
        let mut state = None;
        let mut delays = Vec::new();
        for _ in 0..12 {
            let next = Backoff::after_failure(state, now);
            delays.push(next.next_attempt - now);
            state = Some(next);
        }
        let ms: Vec<u128> = delays.iter().map(Duration::as_millis).collect();
        assert_eq!(
            ms,
            [
                200, 400, 800, 1600, 3200, 6400, 10_000, 10_000, 10_000, 10_000, 10_000, 10_000
            ]
        );
        assert_eq!(state.map(|b| b.failures), Some(12));
    }

    #[test]
    fn backoff_never_overflows() {
        let now = Instant::now();
        let long_failing = Backoff {
            failures: u32::MAX,
            next_attempt: now,
        };
        let next = Backoff::after_failure(Some(long_failing), now);
        assert_eq!(next.failures, u32::MAX);
        assert_eq!(next.next_attempt - now, Backoff::MAX);
    }
}
