//! The API server double kept honest: one scripted sequence of the requests the agent makes
//! (pods and node watches, `pods/status` and `pods/resize` patches, events, Leases,
//! NodeUpgradeChecks, the status writes and deletes of ContainerRecreateRequests,
//! ContainerRestartRequests and ContainerResizeRequests, rollout status replaces, the lists of
//! the census, CRD look-ups) is sent with the same identities to a real kube-apiserver and to the
//! double, both with the shipped CRDs and admission policies, and every answer is compared.
//! The expected answer is always the real apiserver's; each step records only what the agent
//! reads of it (status code and reason of a failure, the fields of a success it depends on,
//! whether the resourceVersion or generation moved), so what legitimately differs (uids,
//! resourceVersions, timestamps, managedFields, defaulted fields) is never compared.

mod support;

use std::time::Duration;

use apiserver_double::{ApiServer, ServerConfig};
use futures::StreamExt;
use futures::future::{BoxFuture, FutureExt};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, WatchEvent, WatchParams,
};
use real_cluster::{ControlPlane, ControlPlaneConfig, NEWEST};
use serde::Deserialize as _;
use serde_json::{Value, json};
use support::real::{NS, apply_shipped, shipped};

/// The agent's node, and another node whose objects it may not write.
const NODE: &str = "cmp-a";
const OTHER: &str = "cmp-b";
const AGENT_USER: &str = "inplaced:node:cmp-a";
const AGENT_GROUP: &str = "inplaced:agents";
/// The annotation the agent writes through `pods/status` (src/containermeta).
const META_ANNOTATION: &str = "apps.kruise.io/runtime-containers-meta";
const LEASE_LABEL: &str = "inplaced.io/agent-lease";

/// One server under comparison: an administrator's client, the agent's (dedicated identity of
/// node cmp-a), and how to make every resourceVersion so far too old for a watch.
struct Side {
    admin: kube::Client,
    agent: kube::Client,
    forget_history: Box<dyn Fn() -> BoxFuture<'static, ()> + Send + Sync>,
    /// Admission reads a policy's params from an informer, a moment behind a change
    /// (kube-apiserver), rather than as they are (the double, which also has no dry run).
    params_lag: bool,
}

/// A failure's message: shown with a difference, never compared (the agent does not read it,
/// except where a step says what it looks for in it).
const MESSAGE: &str = "message (not compared)";

/// What each step answered, in the script's order.
#[derive(Default)]
struct Answers {
    steps: Vec<(String, Value)>,
    /// Values that differ by nature (the uid of a pod named in a later write), and what stands
    /// for them in the answers.
    aliases: Vec<(String, String)>,
}

impl Answers {
    fn record(&mut self, step: &str, answer: Value) {
        let mut text = answer.to_string();
        for (value, alias) in &self.aliases {
            text = text.replace(value.as_str(), alias);
        }
        self.steps
            .push((step.to_string(), serde_json::from_str(&text).unwrap()));
    }

    fn alias(&mut self, value: &str, alias: &str) {
        self.aliases.push((value.to_string(), alias.to_string()));
    }
}

/// An answer without what is never compared.
fn compared(answer: &Value) -> Value {
    match answer {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| k.as_str() != MESSAGE)
                .map(|(k, v)| (k.clone(), compared(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(compared).collect()),
        other => other.clone(),
    }
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

fn pods_resource() -> ApiResource {
    resource("", "v1", "Pod", "pods")
}

/// A failure as the agent tells failures apart (code and reason), a success as `pick` reads it.
fn answer<K: serde::Serialize>(
    result: Result<K, kube::Error>,
    pick: impl FnOnce(&Value) -> Value,
) -> Value {
    match result {
        Ok(object) => json!({"ok": pick(&serde_json::to_value(object).unwrap())}),
        Err(kube::Error::Api(status)) => {
            json!({"code": status.code, "reason": status.reason, MESSAGE: status.message})
        }
        Err(other) => json!({"error": other.to_string()}),
    }
}

/// The answer's code and reason, and whether its message says `words` (what the agent looks
/// for in a message).
fn answer_saying<K: serde::Serialize>(result: Result<K, kube::Error>, words: &str) -> Value {
    match result {
        Err(kube::Error::Api(status)) => json!({"code": status.code, "reason": status.reason,
            "message_says": status.message.contains(words), MESSAGE: status.message}),
        other => answer(other, |v| v.clone()),
    }
}

fn at<'a>(object: &'a Value, pointer: &str) -> &'a Value {
    object.pointer(pointer).unwrap_or(&Value::Null)
}

fn rv(object: &Value) -> Value {
    at(object, "/metadata/resourceVersion").clone()
}

/// How a write's result stands to the object before it: what the agent relies on.
fn moved(before: &Value, after: &Value) -> Value {
    json!({
        "resourceVersion_changed": rv(before) != rv(after),
        "generation_changed": at(before, "/metadata/generation") != at(after, "/metadata/generation"),
        "spec_kept": at(before, "/spec") == at(after, "/spec"),
        "labels_kept": at(before, "/metadata/labels") == at(after, "/metadata/labels"),
    })
}

fn to_value(object: &DynamicObject) -> Value {
    serde_json::to_value(object).unwrap()
}

fn pod(name: &str, node: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": "web"}},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 5,
            "containers": [{
                "name": "app",
                "image": "localhost/busybox:local",
                "resources": {"requests": {"cpu": "100m", "memory": "32Mi"},
                              "limits": {"cpu": "200m", "memory": "64Mi"}},
            }],
        },
    })
}

fn dynamic(value: Value) -> DynamicObject {
    serde_json::from_value(value).unwrap()
}

/// Reads a watch until `last` says an event is the last one wanted (or 30 s pass): each event
/// as `pick` reads it, bookmarks left out (the real apiserver sends them when it likes).
async fn watch_events(
    api: &Api<DynamicObject>,
    params: &WatchParams,
    from: &str,
    pick: impl Fn(&str, &Value) -> Value,
    last: impl Fn(&str, &Value) -> bool,
) -> Value {
    let stream = match api.watch(params, from).await {
        Ok(stream) => stream,
        Err(err) => return answer::<()>(Err(err), |v| v.clone()),
    };
    let mut stream = std::pin::pin!(stream);
    let mut seen = Vec::new();
    let read = async {
        while let Some(event) = stream.next().await {
            let (kind, object) = match event {
                Ok(WatchEvent::Added(o)) => ("ADDED", to_value(&o)),
                Ok(WatchEvent::Modified(o)) => ("MODIFIED", to_value(&o)),
                Ok(WatchEvent::Deleted(o)) => ("DELETED", to_value(&o)),
                Ok(WatchEvent::Bookmark(_)) => continue,
                Ok(WatchEvent::Error(status)) => {
                    seen.push(
                        json!({"type": "ERROR", "code": status.code, "reason": status.reason}),
                    );
                    return;
                }
                Err(err) => {
                    seen.push(json!({"stream_error": err.to_string()}));
                    return;
                }
            };
            seen.push(pick(kind, &object));
            if last(kind, &object) {
                return;
            }
        }
        seen.push(json!("the watch ended"));
    };
    if tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .is_err()
    {
        seen.push(json!("no further event within 30 s"));
    }
    json!(seen)
}

/// The script: every request the agent makes, in an order that lets the watches at the end
/// replay what the writes did.
async fn script(side: &Side) -> Answers {
    let mut out = Answers::default();
    let pods_ar = pods_resource();
    let admin_pods: Api<DynamicObject> = Api::namespaced_with(side.admin.clone(), NS, &pods_ar);
    let agent_pods: Api<DynamicObject> = Api::namespaced_with(side.agent.clone(), NS, &pods_ar);
    let agent_all_pods: Api<DynamicObject> = Api::all_with(side.agent.clone(), &pods_ar);
    let post = PostParams::default();
    let patch = PatchParams::default();

    // --- Pods (src/kube/watches.rs, src/containermeta, src/resize) ---
    for (name, node) in [("web-1", NODE), ("web-2", OTHER)] {
        admin_pods
            .create(&post, &dynamic(pod(name, node)))
            .await
            .unwrap();
    }
    let on_node = ListParams::default().fields(&format!("spec.nodeName={NODE}"));
    let listed = agent_all_pods.list(&on_node).await;
    let pods_rv = listed
        .as_ref()
        .ok()
        .and_then(|l| l.metadata.resource_version.clone())
        .unwrap_or_default();
    out.record(
        "pods: list by spec.nodeName, consistent",
        answer(listed, names_of),
    );
    // The agent's own list: from the watch cache (resourceVersion 0), after the consistent
    // list above made the cache current.
    out.record(
        "pods: list by spec.nodeName at resourceVersion 0",
        answer(
            agent_all_pods.list(&on_node.clone().match_any()).await,
            names_of,
        ),
    );

    let web1 = to_value(&admin_pods.get("web-1").await.unwrap());
    let uid = at(&web1, "/metadata/uid").as_str().unwrap().to_string();
    out.alias(&uid, "<uid of web-1>");
    let meta = |uid: &str, value: &str| json!({"metadata": {"uid": uid, "annotations": {META_ANNOTATION: value}}});
    out.record(
        "pods/status: merge patch of the annotation, naming the pod's uid",
        answer(
            agent_pods
                .patch_status("web-1", &patch, &Patch::Merge(&meta(&uid, "{\"v\":1}")))
                .await,
            |after| {
                json!({"annotation": at(after, &format!("/metadata/annotations/{}", META_ANNOTATION.replace('/', "~1"))),
                       "moved": moved(&web1, after)})
            },
        ),
    );
    out.record(
        "pods/status: annotation patch naming another uid (the agent looks for metadata.uid)",
        answer_saying(
            agent_pods
                .patch_status(
                    "web-1",
                    &patch,
                    &Patch::Merge(&meta("00000000-0000-0000-0000-000000000000", "{}")),
                )
                .await,
            "metadata.uid",
        ),
    );
    let web2_uid = to_value(&admin_pods.get("web-2").await.unwrap())["metadata"]["uid"].clone();
    out.record(
        "pods/status: annotation patch of a pod on another node (policy)",
        answer_saying(
            agent_pods
                .patch_status(
                    "web-2",
                    &patch,
                    &Patch::Merge(&meta(web2_uid.as_str().unwrap(), "{}")),
                )
                .await,
            "ValidatingAdmissionPolicy 'inplaced-own-node-pods'",
        ),
    );
    out.record(
        "pods/status: annotation patch of a missing pod",
        answer(
            agent_pods
                .patch_status("web-9", &patch, &Patch::Merge(&meta(&uid, "{}")))
                .await,
            |v| v.clone(),
        ),
    );

    let before_resize = to_value(&admin_pods.get("web-1").await.unwrap());
    let resize = json!({"spec": {"containers": [{"name": "app", "resources": {
        "requests": {"cpu": "150m"}, "limits": {"cpu": "300m"}}}]}});
    out.record(
        "pods/resize: strategic merge patch of a container's cpu",
        answer(
            agent_pods
                .patch_subresource("resize", "web-1", &patch, &Patch::Strategic(&resize))
                .await,
            |after| {
                json!({"resources": at(after, "/spec/containers/0/resources"),
                       "moved": moved(&before_resize, after)})
            },
        ),
    );
    let too_big = json!({"spec": {"containers": [{"name": "app", "resources": {
        "requests": {"cpu": "3"}, "limits": {"cpu": "3"}}}]}});
    out.record(
        "pods/resize: more cpu than the node's allocatable",
        answer(
            agent_pods
                .patch_subresource("resize", "web-1", &patch, &Patch::Strategic(&too_big))
                .await,
            |v| v.clone(),
        ),
    );
    out.record(
        "pods/resize: patch of a pod on another node (policy)",
        answer(
            agent_pods
                .patch_subresource("resize", "web-2", &patch, &Patch::Strategic(&resize))
                .await,
            |v| v.clone(),
        ),
    );

    // --- Events (src/kube/events.rs) ---
    let events: Api<DynamicObject> = Api::namespaced_with(
        side.agent.clone(),
        NS,
        &resource("", "v1", "Event", "events"),
    );
    let now = "2026-01-01T00:00:00Z";
    let event = json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "web-1.188d0a1b2c3d4e5f", "namespace": NS},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": "web-1",
                           "namespace": NS, "uid": uid},
        "reason": "Killing", "message": "stopping app", "type": "Normal",
        "source": {"component": "inplaced", "host": NODE},
        "firstTimestamp": now, "lastTimestamp": now,
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "count": 1, "reportingComponent": "inplaced", "reportingInstance": NODE,
        "action": "Killing",
    });
    let event_fields = |v: &Value| {
        json!({"count": v["count"], "reason": v["reason"], "message": v["message"],
               "type": v["type"], "involvedObject": v["involvedObject"]["name"]})
    };
    out.record(
        "events: create",
        answer(events.create(&post, &dynamic(event)).await, event_fields),
    );
    let repeat = json!({"count": 2, "lastTimestamp": "2026-01-01T00:00:05Z", "message": "stopping app again"});
    out.record(
        "events: merge patch of a repeat",
        answer(
            events
                .patch("web-1.188d0a1b2c3d4e5f", &patch, &Patch::Merge(&repeat))
                .await,
            event_fields,
        ),
    );
    out.record(
        "events: merge patch of an event gone",
        answer(
            events
                .patch("web-1.0000000000000000", &patch, &Patch::Merge(&repeat))
                .await,
            |v| v.clone(),
        ),
    );

    // --- Leases (src/rollout/controller.rs renew_lease, census) ---
    let lease_ar = resource("coordination.k8s.io", "v1", "Lease", "leases");
    let leases: Api<DynamicObject> = Api::namespaced_with(side.agent.clone(), NS, &lease_ar);
    let own_lease = format!("inplaced-agent-{NODE}");
    let lease = |name: &str, node: &str| {
        dynamic(json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": NS,
                         "labels": {LEASE_LABEL: "true", "inplaced.io/node-name": node}},
            "spec": {"holderIdentity": node, "leaseDurationSeconds": 40,
                     "acquireTime": "2026-01-01T00:00:00.000000Z",
                     "renewTime": "2026-01-01T00:00:00.000000Z"},
        }))
    };
    out.record(
        "leases: get of the agent's Lease before it exists",
        answer(leases.get_opt(&own_lease).await, |v| v.clone()),
    );
    let created = leases.create(&post, &lease(&own_lease, NODE)).await;
    let first = created.as_ref().ok().map(to_value).unwrap_or(Value::Null);
    out.record(
        "leases: create the agent's Lease",
        answer(
            created,
            |v| json!({"spec": v["spec"], "labels": v["metadata"]["labels"]}),
        ),
    );
    out.record(
        "leases: create it again",
        answer(leases.create(&post, &lease(&own_lease, NODE)).await, |v| {
            v.clone()
        }),
    );
    let mut renewed = dynamic(first.clone());
    renewed.data["spec"]["renewTime"] = json!("2026-01-01T00:00:10.000000Z");
    out.record(
        "leases: replace with the Lease as last written",
        answer(
            leases.replace(&own_lease, &post, &renewed).await,
            |after| json!({"renewTime": after["spec"]["renewTime"], "moved": moved(&first, after)}),
        ),
    );
    out.record(
        "leases: replace with a stale resourceVersion",
        answer(leases.replace(&own_lease, &post, &renewed).await, |v| {
            v.clone()
        }),
    );
    out.record(
        "leases: create another node's Lease (policy)",
        answer_saying(
            leases
                .create(&post, &lease(&format!("inplaced-agent-{OTHER}"), OTHER))
                .await,
            "may only write the Lease",
        ),
    );
    out.record(
        "leases: list by the agents' label",
        answer(
            leases
                .list(&ListParams::default().labels(LEASE_LABEL))
                .await,
            names_of,
        ),
    );

    // --- NodeUpgradeCheck (src/upgrade/publish.rs) ---
    let checks: Api<DynamicObject> = Api::all_with(
        side.agent.clone(),
        &resource(
            "inplaced.io",
            "v1alpha1",
            "NodeUpgradeCheck",
            "nodeupgradechecks",
        ),
    );
    let check = |node: &str, kubelet: &str| {
        dynamic(json!({
            "apiVersion": "inplaced.io/v1alpha1", "kind": "NodeUpgradeCheck",
            "metadata": {"name": node, "labels": {"inplaced.io/node-name": node}},
            "status": {"kubeletVersion": kubelet, "changedAt": "2026-01-01T00:00:00Z",
                       "targets": [{"release": "1.37", "restart": 1, "keep": 2, "unknown": 0,
                                    "notRunning": 0, "checkpointHazard": false}]},
        }))
    };
    out.record(
        "nodeupgradechecks: get before it exists",
        answer(checks.get_opt(NODE).await, |v| v.clone()),
    );
    let created = checks.create(&post, &check(NODE, "v1.36.3")).await;
    let first = created.as_ref().ok().map(to_value).unwrap_or(Value::Null);
    out.record(
        "nodeupgradechecks: create with its status (no status subresource)",
        answer(created, |v| v["status"].clone()),
    );
    let mut newer = check(NODE, "v1.36.4");
    newer.metadata.resource_version = first["metadata"]["resourceVersion"]
        .as_str()
        .map(String::from);
    out.record(
        "nodeupgradechecks: replace at the resourceVersion read",
        answer(checks.replace(NODE, &post, &newer).await, |after| {
            json!({"kubeletVersion": after["status"]["kubeletVersion"], "moved": moved(&first, after)})
        }),
    );
    out.record(
        "nodeupgradechecks: replace with a stale resourceVersion",
        answer(checks.replace(NODE, &post, &newer).await, |v| v.clone()),
    );
    out.record(
        "nodeupgradechecks: create another node's (policy)",
        answer(checks.create(&post, &check(OTHER, "v1.36.3")).await, |v| {
            v.clone()
        }),
    );

    // --- ContainerRestartRollout (src/rollout) ---
    let rollout_ar = resource(
        "inplaced.io",
        "v1alpha1",
        "ContainerRestartRollout",
        "containerrestartrollouts",
    );
    let admin_rollouts: Api<DynamicObject> =
        Api::namespaced_with(side.admin.clone(), NS, &rollout_ar);
    let rollouts: Api<DynamicObject> = Api::namespaced_with(side.agent.clone(), NS, &rollout_ar);
    admin_rollouts
        .create(
            &post,
            &dynamic(json!({
                "apiVersion": "inplaced.io/v1alpha1", "kind": "ContainerRestartRollout",
                "metadata": {"name": "roll", "namespace": NS},
                "spec": {"selector": {"matchLabels": {"app": "web"}}, "maxUnavailable": 1},
            })),
        )
        .await
        .unwrap();
    out.record(
        "rollouts: list",
        answer(rollouts.list(&ListParams::default()).await, names_of),
    );
    // The agent has it from its watch; read here as the administrator.
    let read = admin_rollouts.get("roll").await;
    let rollout = read.as_ref().map(to_value).unwrap_or(Value::Null);
    let rollout_uid = rollout["metadata"]["uid"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let with_status = |base: &Value, status: Value| {
        let mut object = base.clone();
        object["status"] = status;
        dynamic(object)
    };
    // Parts as the leader writes them (the CRD has no counts in parts any more: kube-apiserver
    // prunes them, the double, which checks no schema, would keep them).
    let part = json!({"phase": "Progressing", "matched": 1,
                      "nodes": {NODE: {"claims": [
                          {"pod": "web-1", "podUID": uid, "since": "2026-01-01T00:00:00Z"}]}}});
    // No leader Lease in the namespace yet: the rollout policy's binding finds no param.
    out.record(
        "rollouts/status: replace without the namespace's leader Lease (policy)",
        answer_saying(
            rollouts
                .replace_status("roll", &post, &with_status(&rollout, part.clone()))
                .await,
            "no params found for policy binding with `Deny` parameterNotFoundAction",
        ),
    );
    // The agent takes the namespace's leader Lease (the Lease policy: in its own name only).
    let leader = |holder: &str| {
        dynamic(json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "inplaced-rollout-leader", "namespace": NS},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15},
        }))
    };
    out.record(
        "leases: create the leader Lease in another node's name (policy)",
        answer_saying(
            leases.create(&post, &leader(OTHER)).await,
            "inplaced-rollout-leader only in its own name",
        ),
    );
    let taken = leases.create(&post, &leader(NODE)).await;
    let taken_value = taken.as_ref().ok().map(to_value).unwrap_or(Value::Null);
    out.record(
        "leases: create the leader Lease",
        answer(taken, |v| v["spec"]["holderIdentity"].clone()),
    );
    // kube-apiserver's policy reads the Lease from an informer, a moment behind.
    until_status_write(
        side,
        &rollouts,
        &with_status(&rollout, part.clone()),
        |refused| refused.is_none(),
    )
    .await;
    let written = rollouts
        .replace_status("roll", &post, &with_status(&rollout, part.clone()))
        .await;
    let after_first = written.as_ref().ok().map(to_value).unwrap_or(Value::Null);
    out.record(
        "rollouts/status: replace with this node's part, as the leader",
        answer(
            written,
            |after| json!({"status": after["status"], "moved": moved(&rollout, after)}),
        ),
    );
    let mut spec_changed = with_status(
        &after_first,
        json!({"phase": "Progressing", "matched": 2,
        "nodes": after_first["status"]["nodes"].clone()}),
    );
    spec_changed.data["spec"]["maxUnavailable"] = json!(3);
    out.record(
        "rollouts/status: replace carrying a spec change keeps the spec",
        answer(
            rollouts.replace_status("roll", &post, &spec_changed).await,
            |after| json!({"matched": after["status"]["matched"], "moved": moved(&after_first, after)}),
        ),
    );
    out.record(
        "rollouts/status: replace with a stale resourceVersion",
        answer(
            rollouts
                .replace_status("roll", &post, &with_status(&rollout, part.clone()))
                .await,
            |v| v.clone(),
        ),
    );
    let current = to_value(&admin_rollouts.get("roll").await.unwrap());
    let mut foreign = current["status"].clone();
    foreign["nodes"][OTHER] = json!({"skipped": 1});
    out.record(
        "rollouts/status: the leader writes another node's part",
        answer(
            rollouts
                .replace_status("roll", &post, &with_status(&current, foreign.clone()))
                .await,
            |after| after["status"]["nodes"].clone(),
        ),
    );
    // The administrator hands the Lease to the other node: the agent no longer writes.
    let admin_leases: Api<DynamicObject> = Api::namespaced_with(side.admin.clone(), NS, &lease_ar);
    let mut handed = dynamic(taken_value);
    handed.data["spec"]["holderIdentity"] = json!(OTHER);
    admin_leases
        .replace("inplaced-rollout-leader", &post, &handed)
        .await
        .unwrap();
    let current = to_value(&admin_rollouts.get("roll").await.unwrap());
    let mut counted = current["status"].clone();
    counted["matched"] = json!(3);
    let not_leading = with_status(&current, counted);
    until_status_write(side, &rollouts, &not_leading, |refused| {
        refused.is_some_and(|m| m.contains("only while it holds the Lease"))
    })
    .await;
    out.record(
        "rollouts/status: replace while another node holds the leader Lease (policy)",
        answer_saying(
            rollouts.replace_status("roll", &post, &not_leading).await,
            "may write a rollout's status only while it holds the Lease inplaced-rollout-leader",
        ),
    );

    // --- Request objects (src/recreate, src/restartrequest, src/resize) ---
    let restart_ar = resource(
        "inplaced.io",
        "v1alpha1",
        "ContainerRestartRequest",
        "containerrestartrequests",
    );
    // A rollout's request, made by the agent (make_request), owned by the rollout.
    let made = |name: &str, node: &str| {
        dynamic(json!({
            "apiVersion": "inplaced.io/v1alpha1", "kind": "ContainerRestartRequest",
            "metadata": {"name": name, "namespace": NS,
                         "labels": {"inplaced.io/node-name": node, "inplaced.io/rollout": "roll"},
                         "ownerReferences": [{"apiVersion": "inplaced.io/v1alpha1",
                             "kind": "ContainerRestartRollout", "name": "roll", "uid": rollout_uid}]},
            "spec": {"podName": "web-1", "podUID": uid, "containers": [{"name": "app"}]},
        }))
    };
    let agent_restarts: Api<DynamicObject> =
        Api::namespaced_with(side.agent.clone(), NS, &restart_ar);
    out.record(
        "containerrestartrequests: the agent makes a rollout's request",
        answer(agent_restarts.create(&post, &made("roll-web-1", NODE)).await, |v| {
            json!({"labels": v["metadata"]["labels"], "owner": v["metadata"]["ownerReferences"][0]["kind"],
                   "spec": v["spec"]})
        }),
    );
    out.record(
        "containerrestartrequests: making it again",
        answer(
            agent_restarts
                .create(&post, &made("roll-web-1", NODE))
                .await,
            |v| v.clone(),
        ),
    );
    out.record(
        "containerrestartrequests: making one for another node (policy)",
        answer(
            agent_restarts
                .create(&post, &made("roll-web-2", OTHER))
                .await,
            |v| v.clone(),
        ),
    );

    let kinds = [
        RequestKind {
            what: "containerrecreaterequests",
            resource: resource(
                "apps.kruise.io",
                "v1alpha1",
                "ContainerRecreateRequest",
                "containerrecreaterequests",
            ),
            node_label: "crr.apps.kruise.io/node-name",
            spec: json!({"podName": "web-1", "containers": [{"name": "app"}],
                         "strategy": {"failurePolicy": "Fail"}}),
            spec_change: json!({"podName": "web-2"}),
            status: [
                json!({"phase": "Recreating", "containerRecreateStates": [{"name": "app", "phase": "Pending"}]}),
                json!({"phase": "Completed", "completionTime": "2026-01-01T00:01:00Z",
                       "containerRecreateStates": [{"name": "app", "phase": "Succeeded", "isKilled": true}]}),
            ],
            agent_deletes: false,
        },
        RequestKind {
            what: "containerrestartrequests",
            resource: restart_ar.clone(),
            node_label: "inplaced.io/node-name",
            spec: json!({"podName": "web-1", "containers": [{"name": "app"}]}),
            spec_change: json!({"podName": "web-2"}),
            status: [
                json!({"phase": "Restarting", "containers": [{"name": "app", "phase": "Restarting"}]}),
                json!({"phase": "Succeeded", "completionTime": "2026-01-01T00:01:00Z",
                       "containers": [{"name": "app", "phase": "Succeeded"}]}),
            ],
            agent_deletes: true,
        },
        RequestKind {
            what: "containerresizerequests",
            resource: resource(
                "inplaced.io",
                "v1alpha1",
                "ContainerResizeRequest",
                "containerresizerequests",
            ),
            node_label: "inplaced.io/node-name",
            spec: json!({"podName": "web-1", "containers": [{"name": "app",
                         "resources": {"requests": {"cpu": "150m"}}}]}),
            spec_change: json!({"podName": "web-2"}),
            status: [
                json!({"phase": "InProgress", "actuator": "kubelet"}),
                json!({"phase": "Succeeded", "actuator": "kubelet", "completionTime": "2026-01-01T00:01:00Z"}),
            ],
            agent_deletes: true,
        },
    ];
    for kind in &kinds {
        request_steps(side, kind, &mut out).await;
    }

    // --- The census's lists and the CRD look-ups (src/rollout/census.rs, src/kube/watches.rs) ---
    let limit_ranges: Api<DynamicObject> = Api::namespaced_with(
        side.agent.clone(),
        NS,
        &resource("", "v1", "LimitRange", "limitranges"),
    );
    out.record(
        "limitranges: list",
        answer(limit_ranges.list(&ListParams::default()).await, |l| {
            names_of(l)
        }),
    );
    let pdbs: Api<DynamicObject> = Api::namespaced_with(
        side.agent.clone(),
        NS,
        &resource(
            "policy",
            "v1",
            "PodDisruptionBudget",
            "poddisruptionbudgets",
        ),
    );
    out.record(
        "poddisruptionbudgets: list",
        answer(pdbs.list(&ListParams::default()).await, names_of),
    );
    let crd_ar = resource(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
    );
    let crds: Api<DynamicObject> = Api::all_with(side.agent.clone(), &crd_ar);
    out.record(
        "customresourcedefinitions: list one by name (until_crd_serves)",
        answer(
            crds.list(
                &ListParams::default()
                    .fields("metadata.name=containerrestartrequests.inplaced.io")
                    .match_any(),
            )
            .await,
            |l| {
                json!(l["items"].as_array().into_iter().flatten().map(|crd| json!({
                    "name": crd["metadata"]["name"],
                    "established": crd["status"]["conditions"].as_array().into_iter().flatten()
                        .any(|c| c["type"] == "Established" && c["status"] == "True"),
                    "served": crd["spec"]["versions"].as_array().into_iter().flatten()
                        .filter(|v| v["served"] == true).map(|v| v["name"].clone()).collect::<Vec<_>>(),
                })).collect::<Vec<_>>())
            },
        ),
    );
    let admin_crds: Api<DynamicObject> = Api::all_with(side.admin.clone(), &crd_ar);
    out.record(
        "customresourcedefinitions: list by the name of one not installed",
        answer(
            admin_crds
                .list(&ListParams::default().fields("metadata.name=widgets.example.com"))
                .await,
            names_of,
        ),
    );
    // The agent's discovery (src/recreate/controller.rs served_crr_version asks the same of
    // apps.kruise.io/v1beta1, which the double does not serve: kruise 1.9 is not emulated).
    out.record(
        "discovery: a served group version's resources",
        answer(
            side.agent
                .list_api_group_resources("inplaced.io/v1alpha1")
                .await,
            |v| {
                let mut names: Vec<&str> = v["resources"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|r| r["name"].as_str())
                    .collect();
                names.sort_unstable();
                json!(names)
            },
        ),
    );
    out.record(
        "discovery: a group version not served",
        answer(
            side.agent
                .list_api_group_resources("inplaced.io/v1beta1")
                .await,
            |v| v.clone(),
        ),
    );
    let unserved_version: Api<DynamicObject> = Api::namespaced_with(
        side.agent.clone(),
        NS,
        &resource(
            "inplaced.io",
            "v1beta1",
            "ContainerRestartRequest",
            "containerrestartrequests",
        ),
    );
    out.record(
        "a version the CRD does not serve: list",
        answer(unserved_version.list(&ListParams::default()).await, |v| {
            v.clone()
        }),
    );
    let not_installed: Api<DynamicObject> = Api::namespaced_with(
        side.admin.clone(),
        NS,
        &resource("apps.kruise.io", "v1alpha1", "CloneSet", "clonesets"),
    );
    out.record(
        "a resource whose CRD is not installed: list",
        answer(not_installed.list(&ListParams::default()).await, |v| {
            v.clone()
        }),
    );
    out.record(
        "a resource whose CRD is not installed: get",
        answer(not_installed.get("web").await, |v| v.clone()),
    );

    // --- The pods watch, replayed from the agent's list (src/kube/watches.rs) ---
    admin_pods
        .create(&post, &dynamic(pod("web-3", NODE)))
        .await
        .unwrap();
    admin_pods
        .patch_status(
            "web-2",
            &patch,
            &Patch::Merge(&json!({"metadata": {"annotations": {"other": "node"}}})),
        )
        .await
        .unwrap();
    // A pod bound to a node is deleted gracefully (a kubelet ends it), then at once; another
    // at once from the start.
    admin_pods
        .delete("web-3", &DeleteParams::default())
        .await
        .unwrap();
    admin_pods
        .delete("web-3", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    admin_pods
        .create(&post, &dynamic(pod("web-4", NODE)))
        .await
        .unwrap();
    admin_pods
        .delete("web-4", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    let params = WatchParams::default().fields(&format!("spec.nodeName={NODE}"));
    out.record(
        "pods: watch by spec.nodeName from the list's resourceVersion",
        watch_events(
            &agent_all_pods,
            &params,
            &pods_rv,
            |kind, object| {
                json!({"type": kind, "name": object["metadata"]["name"],
                       "annotated": object["metadata"]["annotations"].get(META_ANNOTATION).is_some(),
                       "cpu": at(object, "/spec/containers/0/resources/limits/cpu"),
                       "deleting": object["metadata"].get("deletionTimestamp").is_some()})
            },
            |kind, object| kind == "DELETED" && object["metadata"]["name"] == "web-4",
        )
        .await,
    );
    // The relist path of every request watch: a watch from a resourceVersion the server no
    // longer has answers an ERROR event 410 Expired in its stream.
    (side.forget_history)().await;
    let restarts: Api<DynamicObject> = Api::all_with(side.agent.clone(), &restart_ar);
    out.record(
        "containerrestartrequests: watch from a resourceVersion too old",
        watch_events(
            &restarts,
            &WatchParams::default().labels(&format!("inplaced.io/node-name={NODE}")),
            "1",
            |kind, _| json!(kind),
            |_, _| true,
        )
        .await,
    );
    out
}

fn names_of(list: &Value) -> Value {
    let mut names: Vec<&str> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| o["metadata"]["name"].as_str())
        .collect();
    names.sort_unstable();
    json!(names)
}

/// A kind of request the agent follows on its node: watched by its node label, its status
/// merge-patched (conditioned on the resourceVersion it decided from), deleted when done.
struct RequestKind {
    what: &'static str,
    resource: ApiResource,
    node_label: &'static str,
    spec: Value,
    spec_change: Value,
    status: [Value; 2],
    agent_deletes: bool,
}

async fn request_steps(side: &Side, kind: &RequestKind, out: &mut Answers) {
    let what = kind.what;
    let admin: Api<DynamicObject> = Api::namespaced_with(side.admin.clone(), NS, &kind.resource);
    let agent: Api<DynamicObject> = Api::namespaced_with(side.agent.clone(), NS, &kind.resource);
    let patch = PatchParams::default();
    let on_node = format!("{}={NODE}", kind.node_label);
    let listed = agent.list(&ListParams::default().labels(&on_node)).await;
    let list_rv = listed
        .as_ref()
        .ok()
        .and_then(|l| l.metadata.resource_version.clone())
        .unwrap_or_default();
    out.record(
        &format!("{what}: list by node label, none yet"),
        answer(listed, names_of),
    );
    for (name, node) in [("req-a", NODE), ("req-b", OTHER)] {
        let object = json!({
            "apiVersion": kind.resource.api_version, "kind": kind.resource.kind,
            "metadata": {"name": name, "namespace": NS, "labels": {kind.node_label: node}},
            "spec": kind.spec,
        });
        admin
            .create(&PostParams::default(), &dynamic(object))
            .await
            .unwrap();
    }
    let created = to_value(&admin.get("req-a").await.unwrap());
    let status_patch = |status: &Value, version: &Value| json!({"metadata": {"resourceVersion": version}, "status": status});
    let first = agent
        .patch_status(
            "req-a",
            &patch,
            &Patch::Merge(&status_patch(&kind.status[0], &rv(&created))),
        )
        .await;
    let after_first = first.as_ref().ok().map(to_value).unwrap_or(Value::Null);
    out.record(
        &format!("{what}/status: merge patch at the resourceVersion decided from"),
        answer(
            first,
            |after| json!({"status": after["status"], "moved": moved(&created, after)}),
        ),
    );
    out.record(
        &format!("{what}/status: merge patch decided from an older resourceVersion"),
        answer(
            agent
                .patch_status(
                    "req-a",
                    &patch,
                    &Patch::Merge(&status_patch(&kind.status[1], &rv(&created))),
                )
                .await,
            |v| v.clone(),
        ),
    );
    out.record(
        &format!("{what}/status: the same status again changes nothing"),
        answer(
            agent
                .patch_status(
                    "req-a",
                    &patch,
                    &Patch::Merge(&status_patch(&kind.status[0], &rv(&after_first))),
                )
                .await,
            |after| moved(&after_first, after),
        ),
    );
    // Through the status subresource only status changes: the spec and labels sent are dropped.
    let mut sneaky = status_patch(&kind.status[1], &Value::Null);
    sneaky["spec"] = kind.spec_change.clone();
    sneaky["metadata"] = json!({"labels": {"extra": "label"}});
    out.record(
        &format!("{what}/status: merge patch carrying spec and label changes"),
        answer(
            agent
                .patch_status("req-a", &patch, &Patch::Merge(&sneaky))
                .await,
            |after| json!({"phase": after["status"]["phase"], "moved": moved(&after_first, after)}),
        ),
    );
    out.record(
        &format!("{what}/status: patch of another node's request (policy)"),
        answer_saying(
            agent
                .patch_status(
                    "req-b",
                    &patch,
                    &Patch::Merge(&json!({"status": kind.status[0]})),
                )
                .await,
            "may only modify requests labelled",
        ),
    );
    out.record(
        &format!("{what}/status: patch of a missing request"),
        answer(
            agent
                .patch_status(
                    "req-z",
                    &patch,
                    &Patch::Merge(&json!({"status": kind.status[0]})),
                )
                .await,
            |v| v.clone(),
        ),
    );
    out.record(
        &format!("{what}: a strategic merge patch (custom resources take none)"),
        answer(
            agent
                .patch_status(
                    "req-a",
                    &patch,
                    &Patch::Strategic(&json!({"status": kind.status[0]})),
                )
                .await,
            |v| v.clone(),
        ),
    );
    let marker;
    if kind.agent_deletes {
        let deleted = agent.delete("req-a", &DeleteParams::default()).await;
        out.record(
            &format!("{what}: delete"),
            match deleted {
                Ok(either) => json!({"ok": either.is_left()}),
                Err(err) => answer::<()>(Err(err), |v| v.clone()),
            },
        );
        out.record(
            &format!("{what}: delete again"),
            answer(
                agent
                    .delete("req-a", &DeleteParams::default())
                    .await
                    .map(|e| e.is_left()),
                |v| v.clone(),
            ),
        );
        out.record(
            &format!("{what}: delete another node's request (policy)"),
            answer(
                agent
                    .delete("req-b", &DeleteParams::default())
                    .await
                    .map(|e| e.is_left()),
                |v| v.clone(),
            ),
        );
        marker = "DELETED";
    } else {
        // Moved to another node: it leaves the agent's selector.
        admin
            .patch(
                "req-a",
                &patch,
                &Patch::Merge(&json!({"metadata": {"labels": {kind.node_label: OTHER}}})),
            )
            .await
            .unwrap();
        marker = "DELETED";
    }
    let params = WatchParams::default().labels(&on_node);
    out.record(
        &format!("{what}: watch by node label from the list's resourceVersion"),
        watch_events(
            &agent,
            &params,
            &list_rv,
            |kind, object| {
                json!({"type": kind, "name": object["metadata"]["name"],
                       "phase": object["status"]["phase"]})
            },
            |kind, object| kind == marker && object["metadata"]["name"] == "req-a",
        )
        .await,
    );
}

/// On kube-apiserver, dry runs of the rollout `roll`'s status write `write` until `done` holds
/// of the answer (the refusal's message, or `None` when admitted): its admission reads a
/// policy's params from an informer, a moment behind a change. The double reads them as they
/// are.
async fn until_status_write(
    side: &Side,
    rollouts: &Api<DynamicObject>,
    write: &DynamicObject,
    done: fn(Option<&str>) -> bool,
) {
    if !side.params_lag {
        return;
    }
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    real_cluster::wait_until(
        "the rollout policy seeing the leader Lease as written",
        Duration::from_secs(60),
        || {
            let (rollouts, write, dry_run) = (rollouts.clone(), write.clone(), dry_run.clone());
            async move {
                let answer = rollouts.replace_status("roll", &dry_run, &write).await;
                let refused = match &answer {
                    Ok(_) => None,
                    Err(kube::Error::Api(s)) => Some(s.message.as_str()),
                    Err(e) => return Err(anyhow::anyhow!("{e}")),
                };
                Ok(done(refused).then_some(()))
            }
        },
    )
    .await
    .unwrap();
}

/// The real control plane with the shipped CRDs, the dedicated RBAC and the policies, the test
/// namespace with its ServiceAccount (pods are admitted only with it), and the two nodes.
async fn real_side(cluster: &ControlPlane) -> Side {
    apply_shipped(cluster, "rbac-dedicated.yaml");
    let admin = cluster.admin_client().await.unwrap();
    let agent_kubeconfig = cluster
        .kubeconfig_for("agent-cmp-a.kubeconfig", AGENT_USER, Some(AGENT_GROUP))
        .unwrap();
    let agent = real_cluster::client_from(&agent_kubeconfig).await.unwrap();
    let side = Side {
        admin,
        agent,
        // A custom resource's watch cache starts when its CRD is made, long after
        // resourceVersion 1: that is too old already. (Pods' cache starts with the apiserver,
        // from about 1, and etcd is compacted every five minutes: a pods watch from 1 is served.)
        forget_history: Box::new(|| async {}.boxed()),
        params_lag: true,
    };
    setup(&side, true).await;
    // The policies act once the admission plugin has seen them (and RBAC once its informer
    // has seen the binding): until a Lease the policy refuses is refused by it.
    let leases: Api<DynamicObject> = Api::namespaced_with(
        side.agent.clone(),
        NS,
        &resource("coordination.k8s.io", "v1", "Lease", "leases"),
    );
    let probe = dynamic(
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "policy-probe", "namespace": NS}}),
    );
    let admin_leases: Api<DynamicObject> = Api::namespaced_with(
        side.admin.clone(),
        NS,
        &resource("coordination.k8s.io", "v1", "Lease", "leases"),
    );
    real_cluster::wait_until(
        "the shipped policies in force",
        Duration::from_secs(60),
        || {
            let (leases, admin_leases, probe) =
                (leases.clone(), admin_leases.clone(), probe.clone());
            async move {
                match leases.create(&PostParams::default(), &probe).await {
                    Err(kube::Error::Api(s)) if s.message.contains("ValidatingAdmissionPolicy") => {
                        Ok(Some(()))
                    }
                    Ok(_) => {
                        admin_leases
                            .delete("policy-probe", &DeleteParams::default())
                            .await?;
                        Ok(None)
                    }
                    Err(_) => Ok(None),
                }
            }
        },
    )
    .await
    .unwrap();
    side
}

/// The double as the suite's tests start it (graceful pod deletion), serving the shipped CRDs
/// and kruise's instead of its own, with the shipped policies and the agent's token.
async fn double_side(server: &ApiServer) -> Side {
    let crds = apiserver_double::CRDS;
    for doc in shipped_documents() {
        if doc["kind"] == "CustomResourceDefinition" {
            server.store().create(crds, doc).unwrap();
        }
    }
    let kruise = real_cluster::kruise_crd("apps.kruise.io_containerrecreaterequests.yaml").unwrap();
    server
        .store()
        .create(
            crds,
            yaml_documents(&std::fs::read_to_string(kruise).unwrap()).remove(0),
        )
        .unwrap();
    support::cluster::apply_shipped_policy(server);
    server
        .tokens()
        .add_with_groups("agent-cmp-a", AGENT_USER, &[AGENT_GROUP], None);
    let admin = node_sandbox::util::kube_client(&server.kubeconfig(None))
        .await
        .unwrap();
    let agent = node_sandbox::util::kube_client(&server.kubeconfig(Some("agent-cmp-a")))
        .await
        .unwrap();
    let store = server.raw_store().clone();
    let side = Side {
        admin,
        agent,
        // The double's way to forget: every resourceVersion so far answers 410.
        forget_history: Box::new(move || {
            store.compact();
            async {}.boxed()
        }),
        params_lag: false,
    };
    setup(&side, false).await;
    side
}

/// The CRDs among the shipped manifests.
fn shipped_documents() -> Vec<Value> {
    let mut docs = Vec::new();
    for entry in std::fs::read_dir(shipped("")).unwrap() {
        let path = entry.unwrap().path();
        if path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("crd-")
        {
            docs.extend(yaml_documents(&std::fs::read_to_string(path).unwrap()));
        }
    }
    docs
}

fn yaml_documents(text: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|doc| Value::deserialize(doc).unwrap())
        .filter(|doc| !doc.is_null())
        .collect()
}

/// What the script starts from on either side (not compared): the namespace, its default
/// ServiceAccount where pods need it, and the two Node objects.
async fn setup(side: &Side, service_account: bool) {
    let post = PostParams::default();
    let namespaces: Api<DynamicObject> = Api::all_with(
        side.admin.clone(),
        &resource("", "v1", "Namespace", "namespaces"),
    );
    namespaces
        .create(
            &post,
            &dynamic(json!({"apiVersion": "v1", "kind": "Namespace",
                                       "metadata": {"name": NS}})),
        )
        .await
        .unwrap();
    if service_account {
        let accounts: Api<DynamicObject> = Api::namespaced_with(
            side.admin.clone(),
            NS,
            &resource("", "v1", "ServiceAccount", "serviceaccounts"),
        );
        accounts
            .create(
                &post,
                &dynamic(json!({"apiVersion": "v1", "kind": "ServiceAccount",
                                           "metadata": {"name": "default", "namespace": NS}})),
            )
            .await
            .unwrap();
    }
    let nodes: Api<DynamicObject> =
        Api::all_with(side.admin.clone(), &resource("", "v1", "Node", "nodes"));
    for node in [NODE, OTHER] {
        nodes
            .create(
                &post,
                &dynamic(json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": node, "labels": {"kubernetes.io/hostname": node}}})),
            )
            .await
            .unwrap();
        // What a kubelet reports: the apiserver checks a resize against it.
        nodes
            .patch_status(
                node,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": {
                    "capacity": {"cpu": "2", "memory": "4Gi", "pods": "110"},
                    "allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"},
                }})),
            )
            .await
            .unwrap();
    }
}

/// Every step whose answers differ, real first.
fn differences(real: &Answers, double: &Answers) -> Vec<String> {
    let mut found = Vec::new();
    for (i, (step, expected)) in real.steps.iter().enumerate() {
        match double.steps.get(i) {
            Some((other, got)) if other == step => {
                if compared(got) != compared(expected) {
                    found.push(format!(
                        "{step}:\n    real:   {expected}\n    double: {got}"
                    ));
                }
            }
            _ => found.push(format!(
                "{step}: not answered in the same order by the double"
            )),
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the real Kubernetes binaries: run tests/run-all.sh"]
async fn the_double_answers_the_agents_requests_as_the_real_apiserver_does() {
    let mut config = ControlPlaneConfig::new(NEWEST);
    // Nothing here needs a controller: the namespace's ServiceAccount is made by the test.
    config.controllers.clear();
    let cluster = ControlPlane::start(config).await.unwrap();
    let real = real_side(&cluster).await;
    let real_answers = script(&real).await;

    let server = ApiServer::start(ServerConfig {
        graceful_pod_deletion: true,
        // Served from the CRDs applied below, as on the real server, not the double's own.
        absent_crds: [
            "containerrecreaterequests.apps.kruise.io",
            "containerresizerequests.inplaced.io",
            "containerrestartrequests.inplaced.io",
            "containerrestartrollouts.inplaced.io",
            "nodeupgradechecks.inplaced.io",
        ]
        .map(String::from)
        .to_vec(),
        ..Default::default()
    })
    .await
    .unwrap();
    let double = double_side(&server).await;
    let double_answers = script(&double).await;

    for (step, answer) in &real_answers.steps {
        eprintln!("real: {step}: {answer}");
    }
    let found = differences(&real_answers, &double_answers);
    assert!(
        found.is_empty(),
        "the double answered {} of {} steps unlike kube-apiserver {}:\n{}",
        found.len(),
        real_answers.steps.len(),
        cluster.version(),
        found.join("\n")
    );
}
