//! The one writer of what the agent reports on API objects: a request's status
//! (ContainerRecreateRequests, ContainerResizeRequests) or a pod's
//! `runtime-containers-meta` annotation, each a merge patch through the object's status
//! subresource. Off the caller's loop, one write per object at a time, no rewrite of a value
//! just written while the watch has not delivered it back yet, and failed writes retried per
//! object with exponential backoff (as client-go's work queues do), so that an API outage
//! neither floods the log nor spends the agent's API rate on retries that watches need to
//! recover. What the writer remembers of an object is one [`Tracked`] entry, forgotten in one
//! place ([`StatusWriter::retain`]).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use ::kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use serde::Serialize;
use serde_json::{Value, json};
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

/// Where in the object the written value goes.
#[derive(Clone, Copy, Debug)]
pub enum Target {
    /// The whole `status`; `clear` names the status fields a merge patch must null explicitly
    /// when the new status lacks them.
    Status { clear: &'static [&'static str] },
    /// One annotation, for the object of this UID only: the API server refuses another UID
    /// (422), so a successor under the same name (a StatefulSet's pod) never receives what was
    /// decided for its predecessor.
    Annotation(&'static str),
}

/// How a finished write ended, for the caller's metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    Landed,
    Failed,
}

pub struct StatusWriter<S> {
    client: ::kube::Client,
    resource: ApiResource,
    kind: &'static str,
    target: Target,
    tracked: HashMap<String, Tracked<S>>,
    results_tx: mpsc::Sender<WriteResult<S>>,
    results: mpsc::Receiver<WriteResult<S>>,
}

/// What the writer knows of one object.
struct Tracked<S> {
    /// The value last asked for that the object did not have then.
    wanted: Option<S>,
    /// The last write that landed.
    landed: Option<Landed<S>>,
    /// A resourceVersion a write was decided from and refused for (409): decisions from it
    /// would be refused too, so they wait for the watch to bring the newer version.
    outdated: Option<String>,
    /// A write is under way.
    writing: bool,
    /// Failed attempts in a row and when the next may start.
    failing: Option<Backoff>,
}

impl<S> Default for Tracked<S> {
    fn default() -> Self {
        Tracked {
            wanted: None,
            landed: None,
            outdated: None,
            writing: false,
            failing: None,
        }
    }
}

/// A write that landed.
struct Landed<S> {
    value: S,
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
    /// Refused for what it is (4xx other than 409 and 429): asking again soon will not help.
    Refused,
    /// The API server was not reached, or failed (5xx, 429, no answer).
    Failed,
}

/// A finished write: the object's UID, the value, the version it was conditioned on, and
/// how it ended.
type WriteResult<S> = (String, S, Option<String>, WriteOutcome);

/// How long a written value is trusted over the (older) one the watch still shows.
const TRUST_WRITTEN: Duration = Duration::from_secs(5);

/// Failed writes of one object in a row, and when the next attempt may start.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Backoff {
    failures: u32,
    next_attempt: Instant,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(200);
    /// After an outage (5xx, no answer): a short cap keeps what users wait on (a request's
    /// outcome, the annotation kruise-manager waits for) close behind its end; the agent's token
    /// bucket bounds what the retries cost the API server.
    const MAX: Duration = Duration::from_secs(10);
    /// After a refusal of the write itself (a webhook, a policy): it will likely be refused
    /// again, so a node with many such objects must not keep the API server busy with them.
    const MAX_REFUSED: Duration = Duration::from_secs(300);

    /// The state after one more failure at `now`: 200 ms, 400 ms, ... up to 10 s, or up to
    /// 5 min when the API server refused the write.
    fn after_failure(previous: Option<Backoff>, now: Instant, refused: bool) -> Backoff {
        let failures = previous.map_or(1, |b| b.failures.saturating_add(1));
        let cap = if refused {
            Self::MAX_REFUSED
        } else {
            Self::MAX
        };
        let delay = Self::FIRST
            .saturating_mul(1u32 << (failures - 1).min(16))
            .min(cap);
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
        target: Target,
    ) -> Self {
        let (results_tx, results) = mpsc::channel(64);
        StatusWriter {
            client,
            resource,
            kind,
            target,
            tracked: HashMap::new(),
            results_tx,
            results,
        }
    }

    /// Writes `value` unless the object (`current`) or our last write already says it. Merge
    /// patch carrying the object's resourceVersion when known: a value decided from an older
    /// version gets 409 and is decided again, never written over a newer one.
    pub fn write(&mut self, object: &ObjectRef, current: &S, value: S) {
        if value == *current {
            return;
        }
        let entry = self.tracked.entry(object.uid.clone()).or_default();
        entry.wanted = Some(value.clone());
        let last = entry.landed.as_ref();
        let just_written = last.is_some_and(|w| w.value == value && w.at.elapsed() < TRUST_WRITTEN);
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
            }) || entry.outdated == object.resource_version);
        let backing_off = entry
            .failing
            .is_some_and(|b| Instant::now() < b.next_attempt);
        // One write per object at a time keeps them in order; the next pass writes again.
        if just_written || superseded || backing_off || entry.writing {
            return;
        }
        entry.writing = true;
        let failures = entry.failing.map_or(0, |b| b.failures);
        let patch = self.patch(object, &value);
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &object.namespace, &self.resource);
        let results = self.results_tx.clone();
        let object = object.clone();
        let kind = self.kind;
        tokio::spawn(async move {
            let result = api
                .patch_status(&object.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await;
            match &result {
                // Decided from a version that is no longer current: the next pass decides again.
                Err(::kube::Error::Api(status)) if status.code == 409 => {
                    tracing::debug!(kind, name = %object.name, "status decided from an older version; deciding again")
                }
                // The object was replaced under the same name; the successor's own pass writes.
                Err(::kube::Error::Api(status))
                    if status.code == 422 && status.message.contains("metadata.uid") =>
                {
                    tracing::debug!(kind, name = %object.name, uid = %object.uid, message = %status.message, "object replaced; not written")
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
                Err(::kube::Error::Api(status)) if crate::kube::refuses_request(&status) => {
                    WriteOutcome::Refused
                }
                Err(_) => WriteOutcome::Failed,
            };
            let _ = results
                .send((object.uid, value, object.resource_version, outcome))
                .await;
        });
    }

    /// The merge patch that writes `value` into `object`.
    fn patch(&self, object: &ObjectRef, value: &S) -> Value {
        let mut patch = match self.target {
            Target::Status { clear } => {
                let mut patch = json!({ "status": value });
                for key in clear {
                    if patch["status"].get(key).is_none() {
                        patch["status"][key] = Value::Null;
                    }
                }
                patch
            }
            Target::Annotation(key) => json!({
                "metadata": {"uid": &object.uid, "annotations": {key: value}}
            }),
        };
        if let Some(version) = &object.resource_version {
            patch["metadata"]["resourceVersion"] = json!(version);
        }
        patch
    }

    /// For an object whose value only this agent writes: the value last asked for while the
    /// watched one (`watched`) does not show it yet, written again meanwhile (so a failed
    /// write is retried). Decisions made from it see their own effects before the watch does:
    /// a request concluded here is over.
    pub fn newest(&mut self, object: &ObjectRef, watched: &S) -> Option<S> {
        let entry = self.tracked.get_mut(&object.uid)?;
        let wanted = entry.wanted.clone()?;
        if wanted == *watched {
            entry.wanted = None;
            return None;
        }
        self.write(object, watched, wanted.clone());
        Some(wanted)
    }

    /// Waits for the next write to finish and records it (use in `select!`).
    pub async fn finished(&mut self) -> Option<Written> {
        let (uid, value, based_on, outcome) = self.results.recv().await?;
        let entry = self.tracked.entry(uid).or_default();
        entry.writing = false;
        Some(match outcome {
            WriteOutcome::Landed(landed_as) => {
                entry.failing = None;
                entry.outdated = None;
                entry.landed = Some(Landed {
                    value,
                    at: Instant::now(),
                    based_on,
                    landed_as,
                });
                Written::Landed
            }
            outcome => {
                let refused = matches!(outcome, WriteOutcome::Refused);
                if let (WriteOutcome::Outdated, Some(version)) = (outcome, based_on) {
                    entry.outdated = Some(version);
                }
                entry.failing = Some(Backoff::after_failure(
                    entry.failing,
                    Instant::now(),
                    refused,
                ));
                Written::Failed
            }
        })
    }

    /// Whether a write is under way.
    pub fn busy(&self) -> bool {
        self.tracked.values().any(|t| t.writing)
    }

    /// Forgets objects no longer watched (a write under way is remembered until it ends).
    pub fn retain(&mut self, live: &HashSet<String>) {
        self.tracked
            .retain(|uid, t| t.writing || live.contains(uid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use k8s_openapi::api::core::v1::Pod;

    async fn double() -> (apiserver_double::ApiServer, ::kube::Client) {
        let server = apiserver_double::ApiServer::start(apiserver_double::ServerConfig::default())
            .await
            .expect("api server starts");
        let client = node_sandbox::util::kube_client(&server.kubeconfig(None))
            .await
            .expect("client builds");
        (server, client)
    }

    async fn create_pod(pods: &Api<Pod>) -> ObjectRef {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web-0", "namespace": "default"},
            "spec": {"nodeName": "n", "containers": [{"name": "app", "image": "busybox:1"}]}
        }))
        .expect("pod");
        let created = pods
            .create(&Default::default(), &pod)
            .await
            .expect("create");
        ObjectRef {
            namespace: "default".into(),
            name: "web-0".into(),
            uid: created.metadata.uid.expect("server sets the uid"),
            resource_version: None,
        }
    }

    const ANNOTATION: &str = "example.com/meta";

    fn annotation(pod: Pod) -> Option<String> {
        pod.metadata
            .annotations
            .and_then(|a| a.get(ANNOTATION).cloned())
    }

    #[tokio::test]
    async fn an_annotation_is_written_only_to_the_pod_it_was_decided_for() {
        let (_server, client) = double().await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        let old = create_pod(&pods).await;
        pods.delete(
            "web-0",
            &::kube::api::DeleteParams::default().grace_period(0),
        )
        .await
        .expect("delete");
        let new = create_pod(&pods).await;
        let mut writer = StatusWriter::new(
            client,
            ApiResource::erase::<Pod>(&()),
            "Pod",
            Target::Annotation(ANNOTATION),
        );

        writer.write(&old, &String::new(), "{\"old\":1}".to_string());
        assert!(writer.busy());
        assert_eq!(writer.finished().await, Some(Written::Failed));
        assert_eq!(annotation(pods.get("web-0").await.expect("get")), None);

        writer.write(&new, &String::new(), "{\"new\":1}".to_string());
        assert_eq!(writer.finished().await, Some(Written::Landed));
        assert_eq!(
            annotation(pods.get("web-0").await.expect("get")).as_deref(),
            Some("{\"new\":1}")
        );
    }

    #[tokio::test]
    async fn a_status_clears_what_it_lacks_and_counts_over_the_watch_until_seen() {
        let (_server, client) = double().await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        let pod = create_pod(&pods).await;
        let mut writer = StatusWriter::new(
            client,
            ApiResource::erase::<Pod>(&()),
            "Pod",
            Target::Status { clear: &["reason"] },
        );
        let first = json!({"message": "first", "reason": "Because"});
        writer.write(&pod, &json!({}), first.clone());
        assert_eq!(writer.finished().await, Some(Written::Landed));
        // The watch still shows the old status: the written one counts, and is not written
        // again meanwhile.
        assert_eq!(writer.newest(&pod, &json!({})), Some(first.clone()));
        assert!(!writer.busy(), "a status just written is not written again");
        assert_eq!(writer.newest(&pod, &first), None);
        assert_eq!(writer.newest(&pod, &json!({})), None, "seen: forgotten");

        writer.write(&pod, &first, json!({"message": "second"}));
        assert_eq!(writer.finished().await, Some(Written::Landed));
        let status = pods
            .get("web-0")
            .await
            .expect("get")
            .status
            .expect("status");
        assert_eq!(status.message.as_deref(), Some("second"));
        assert_eq!(status.reason, None, "cleared explicitly by the merge patch");
    }

    #[tokio::test]
    async fn a_failed_write_waits_for_its_backoff_and_a_forgotten_object_is_written_afresh() {
        let (_server, client) = double().await;
        let mut writer = StatusWriter::new(
            client,
            ApiResource::erase::<Pod>(&()),
            "Pod",
            Target::Status { clear: &[] },
        );
        let missing = ObjectRef {
            namespace: "default".into(),
            name: "nowhere".into(),
            uid: "u-missing".into(),
            resource_version: None,
        };
        writer.write(&missing, &json!({}), json!({"message": "x"}));
        assert_eq!(writer.finished().await, Some(Written::Failed));
        writer.write(&missing, &json!({}), json!({"message": "x"}));
        assert!(!writer.busy(), "backing off: no second attempt at once");
        writer.retain(&HashSet::new());
        writer.write(&missing, &json!({}), json!({"message": "x"}));
        assert!(writer.busy(), "forgotten with its backoff");
        assert_eq!(writer.finished().await, Some(Written::Failed));
    }

    #[test]
    fn backoff_doubles_from_200_ms_and_stops_at_10_s() {
        let now = Instant::now();
        let mut state = None;
        let mut delays = Vec::new();
        for _ in 0..12 {
            let next = Backoff::after_failure(state, now, false);
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
        let next = Backoff::after_failure(Some(long_failing), now, false);
        assert_eq!(next.failures, u32::MAX);
        assert_eq!(next.next_attempt - now, Backoff::MAX);
        let refused = Backoff::after_failure(Some(long_failing), now, true);
        assert_eq!(refused.next_attempt - now, Backoff::MAX_REFUSED);
    }

    #[test]
    fn a_refused_write_backs_off_to_5_minutes() {
        let now = Instant::now();
        let mut state = None;
        let mut last = Duration::ZERO;
        for _ in 0..14 {
            let next = Backoff::after_failure(state, now, true);
            last = next.next_attempt - now;
            state = Some(next);
        }
        assert_eq!(last, Duration::from_secs(300));
        let once = Backoff::after_failure(None, now, true);
        assert_eq!(once.next_attempt - now, Backoff::FIRST);
    }
}
