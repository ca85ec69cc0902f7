//! Writes this node's NodeUpgradeCheck: the object named after the node, read once, then
//! written only when the answer changes, at most once every [`MIN_WRITE_INTERVAL`] (the newest
//! answer wins). Nothing is sent while nothing changes. An API server that does not serve the
//! kind (its CRD not installed) or refuses the write (RBAC, the admission policy) is said once
//! per answer in the log; the next change tries again.

use std::sync::Arc;
use std::time::Duration;

use ::kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::NodeAnswer;

/// The least time between two writes of the object.
pub const MIN_WRITE_INTERVAL: Duration = Duration::from_secs(10);
/// The longest wait before a failed write is tried again.
const MAX_RETRY: Duration = Duration::from_secs(60);

/// The NodeUpgradeCheck kind.
pub fn resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("inplaced.io", "v1alpha1", "NodeUpgradeCheck"),
        "nodeupgradechecks",
    )
}

/// The object for `node` holding `answer`.
pub fn object(node: &str, answer: &NodeAnswer) -> Value {
    json!({
        "apiVersion": "inplaced.io/v1alpha1",
        "kind": "NodeUpgradeCheck",
        "metadata": {"name": node, "labels": {"inplaced.io/node-name": node}},
        "status": answer.status(),
    })
}

/// How one write attempt ended.
enum Written {
    Done,
    /// Refused for this answer (not served, forbidden, invalid): wait for the next one.
    Refused,
    /// Failed (an outage, a conflict): try again.
    Failed,
}

/// Writes every new answer from `answers` until the sender is dropped.
pub async fn run(
    client: ::kube::Client,
    node: String,
    mut answers: watch::Receiver<Option<Arc<NodeAnswer>>>,
) {
    let api: Api<DynamicObject> = Api::all_with(client, &resource());
    // What the API server holds, as far as this agent knows (`None`: not read yet).
    let mut stored: Option<Option<DynamicObject>> = None;
    let mut retry = Duration::from_secs(1);
    loop {
        let Some(answer) = answers.borrow_and_update().clone() else {
            if answers.changed().await.is_err() {
                return;
            }
            continue;
        };
        match write(&api, &node, &answer, &mut stored).await {
            Written::Done | Written::Refused => {
                retry = Duration::from_secs(1);
                tokio::time::sleep(MIN_WRITE_INTERVAL).await;
                if !answers.has_changed().unwrap_or(false) && answers.changed().await.is_err() {
                    return;
                }
            }
            Written::Failed => {
                stored = None;
                tokio::select! {
                    () = tokio::time::sleep(retry) => {}
                    changed = answers.changed() => if changed.is_err() { return },
                }
                retry = (retry * 2).min(MAX_RETRY);
            }
        }
    }
}

async fn write(
    api: &Api<DynamicObject>,
    node: &str,
    answer: &NodeAnswer,
    stored: &mut Option<Option<DynamicObject>>,
) -> Written {
    if stored.is_none() {
        match api.get_opt(node).await {
            Ok(found) => *stored = Some(found),
            Err(err) => return failed_or_refused(&err, node),
        }
    }
    let wanted = object(node, answer);
    let current = stored.as_ref().and_then(Option::as_ref);
    if let Some(current) = current
        && current.data.get("status").map(NodeAnswer::comparable)
            == wanted.get("status").map(NodeAnswer::comparable)
    {
        return Written::Done;
    }
    let mut body: DynamicObject = match serde_json::from_value(wanted) {
        Ok(body) => body,
        Err(err) => {
            tracing::error!(error = %err, "cannot encode the NodeUpgradeCheck");
            return Written::Refused;
        }
    };
    let result = match current {
        Some(current) => {
            body.metadata.resource_version = current.metadata.resource_version.clone();
            api.replace(node, &PostParams::default(), &body).await
        }
        None => api.create(&PostParams::default(), &body).await,
    };
    match result {
        Ok(written) => {
            tracing::debug!(node, "NodeUpgradeCheck written");
            *stored = Some(Some(written));
            Written::Done
        }
        Err(err) => failed_or_refused(&err, node),
    }
}

fn failed_or_refused(err: &::kube::Error, node: &str) -> Written {
    match err {
        ::kube::Error::Api(status) if status.code == 404 => {
            tracing::warn!(
                node,
                "the API server does not serve NodeUpgradeChecks (apply crd-nodeupgradechecks.yaml); this node's upgrade answer is in its metrics only"
            );
            Written::Refused
        }
        ::kube::Error::Api(status)
            if crate::kube::refuses_request(status) && status.code != 409 =>
        {
            tracing::warn!(node, code = status.code, message = %status.message, "the API server refuses this node's NodeUpgradeCheck");
            Written::Refused
        }
        other => {
            tracing::debug!(node, error = %other, "NodeUpgradeCheck not written; trying again");
            Written::Failed
        }
    }
}
