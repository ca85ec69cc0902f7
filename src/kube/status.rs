//! Status writes for the request objects the agent handles (ContainerRecreateRequests,
//! ContainerResizeRequests): a merge patch on the status subresource, off the caller's loop,
//! one write per object at a time, and no rewrite of a status just written while the watch
//! has not delivered it back yet.

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
}

pub struct StatusWriter<S> {
    client: ::kube::Client,
    resource: ApiResource,
    kind: &'static str,
    /// Status fields a merge patch must clear explicitly when the new status lacks them.
    clear: &'static [&'static str],
    /// UID → the status last written and when.
    written: HashMap<String, (S, Instant)>,
    /// UIDs with a write under way.
    writing: HashSet<String>,
    results_tx: mpsc::Sender<(String, S, bool)>,
    results: mpsc::Receiver<(String, S, bool)>,
}

/// How long a written status is trusted over the (older) one the watch still shows.
const TRUST_WRITTEN: Duration = Duration::from_secs(5);

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
            writing: HashSet::new(),
            results_tx,
            results,
        }
    }

    /// Writes `status` unless the object (`current`) or our last write already says it. Merge
    /// patch without a resourceVersion: no conflicts with other writers of labels/annotations.
    pub fn write(&mut self, object: &ObjectRef, current: &S, status: S) {
        let just_written = self
            .written
            .get(&object.uid)
            .is_some_and(|(written, at)| *written == status && at.elapsed() < TRUST_WRITTEN);
        // One write per object at a time keeps them in order; the next pass writes again.
        if status == *current || just_written || self.writing.contains(&object.uid) {
            return;
        }
        let mut patch = serde_json::json!({ "status": &status });
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
        tokio::spawn(async move {
            let result = api
                .patch_status(&object.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await;
            if let Err(err) = &result {
                tracing::warn!(kind, name = %object.name, namespace = %object.namespace, error = %err, "cannot write status; retrying");
            }
            let _ = results.send((object.uid, status, result.is_ok())).await;
        });
    }

    /// Waits for the next write to finish and records it (use in `select!`).
    pub async fn finished(&mut self) {
        if let Some((uid, status, ok)) = self.results.recv().await {
            self.writing.remove(&uid);
            if ok {
                self.written.insert(uid, (status, Instant::now()));
            }
        }
    }

    /// Forgets objects no longer watched.
    pub fn retain(&mut self, live: &HashSet<String>) {
        self.written.retain(|uid, _| live.contains(uid));
    }
}
