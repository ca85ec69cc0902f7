//! The shipped RBAC against what the agent really does: an end-to-end run on the sandbox (a pod,
//! a ContainerRecreateRequest with a preStop hook, the kill, status and events; a pod opted in to
//! runtime container meta, its annotation and an env-from-metadata restart), then every
//! request the agent made, from the API double's audit log, is checked against the ClusterRoles
//! in packaging/kubernetes/. A verb or resource the agent uses that a shipped role does not grant
//! fails the test: grant it (with a comment naming the feature) or do not use it.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::sandbox::{AGENT_USER, NS, Node, NodeOptions, container_id, container_phase};
use support::{cluster_roles, unique};

const LONG: Duration = Duration::from_secs(60);

/// What every authenticated user may do in a default cluster (system:discovery,
/// system:basic-user and system:public-info-viewer): discovery and health, never resources.
fn default_authenticated_rules() -> Vec<Value> {
    vec![json!({"verbs": ["get"], "nonResourceURLs": [
        "/api", "/api/*", "/apis", "/apis/*", "/version", "/version/",
        "/healthz", "/livez", "/readyz"]})]
}

/// The part of the Node authorizer that a node's agent relies on (plugin/pkg/auth/authorizer/node:
/// reads of pods and nodes — limited to its own by field selector since 1.32 — events, and the
/// status of its own pods). The node-bound identity gets these plus rbac-node-bound.yaml.
fn node_authorizer_rules() -> Vec<Value> {
    vec![
        json!({"apiGroups": [""], "resources": ["pods", "nodes"], "verbs": ["get", "list", "watch"]}),
        json!({"apiGroups": [""], "resources": ["events"], "verbs": ["create", "update", "patch"]}),
        json!({"apiGroups": [""], "resources": ["pods/status"], "verbs": ["update", "patch"]}),
    ]
}

fn describe(entries: &[apiserver_double::AuditEntry]) -> Vec<String> {
    let mut lines: Vec<String> = entries
        .iter()
        .map(|e| {
            format!(
                "{} {} {} ({})",
                e.request.verb,
                if e.request.api_group.is_empty() {
                    "core".to_string()
                } else {
                    e.request.api_group.clone()
                },
                e.rbac_resource(),
                e.request.path
            )
        })
        .collect();
    lines.sort();
    lines.dedup();
    lines
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn the_agent_uses_only_what_the_shipped_roles_grant() {
    let node = Node::start().await;
    let pod_name = unique("rbac");
    let mut app = json!({"name": "app", "image": "localhost/busybox:local",
        "command": ["/bin/sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.1; done"]});
    app["lifecycle"] = json!({"preStop": {"exec": {"command": ["/bin/sh", "-c", "true"]}}});
    let pod = node.run_pod(&pod_name, json!({"containers": [app]})).await;
    let old = container_id(&pod, "app");
    let crr_name = unique("crr");
    node.create_crr(&crr_name, &pod_name, &["app"], json!({}))
        .await;
    let crr = node.wait_completed(&crr_name, LONG).await;
    assert_eq!(container_phase(&crr, "app"), "Succeeded", "{crr:#}");
    assert_eq!(node.proxy.stop_count(&old), 1);
    // The events go out beside the kill: wait for the Killing event before reading the log.
    node.wait_event(&pod_name, "Killing", LONG).await;

    // Runtime container meta (the apps.kruise.io/runtime-containers-meta annotation through
    // pods/status) and an env-from-metadata restart, through inplaced's opt-in annotation.
    let meta_pod = unique("meta");
    let app = json!({"name": "app", "image": "localhost/busybox:local",
        "command": ["/bin/sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.1; done"],
        "env": [{"name": "V", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['v']"}}}]});
    let pod = node
        .run_pod_with_meta(
            &meta_pod,
            json!({"annotations": {"v": "1", "inplaced.io/runtime-containers-meta": "true"}}),
            json!({"containers": [app]}),
        )
        .await;
    let first = container_id(&pod, "app");
    node.wait_pod(&meta_pod, LONG, |p| {
        p.pointer("/metadata/annotations/apps.kruise.io~1runtime-containers-meta")
            .is_some()
    })
    .await;
    node.patch_pod_metadata(&meta_pod, json!({"annotations": {"v": "2"}}))
        .await;
    node.wait_pod(&meta_pod, LONG, |p| {
        container_id(p, "app") != first && support::sandbox::all_running(p)
    })
    .await;
    assert_eq!(node.proxy.stop_count(&first), 1, "one env restart");

    // A ContainerRestartRequest (no OpenKruise): the stop, its status, and its deletion after
    // ttlSecondsAfterFinished.
    let restart_pod = unique("restart");
    let pod = node
        .run_pod(
            &restart_pod,
            json!({"containers": [{"name": "app", "image": "localhost/busybox:local",
                "command": ["/bin/sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.1; done"]}]}),
        )
        .await;
    let restarted = container_id(&pod, "app");
    let request = unique("ctrr");
    node.server
        .store()
        .create(
            "containerrestartrequests",
            json!({"apiVersion": "inplaced.io/v1alpha1", "kind": "ContainerRestartRequest",
                   "metadata": {"name": request, "namespace": NS,
                                "labels": {"inplaced.io/node-name": node.node}},
                   "spec": {"podName": restart_pod, "ttlSecondsAfterFinished": 0}}),
        )
        .unwrap();
    let deadline = std::time::Instant::now() + LONG;
    while node
        .server
        .store()
        .get("containerrestartrequests", NS, &request)
        .is_some()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "{request} was never deleted"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        node.proxy.stop_count(&restarted),
        1,
        "one restart request stop"
    );

    assert_granted(
        &node,
        &[
            "list core pods",
            "watch core pods",
            "list core nodes",
            "watch core nodes",
            "list apps.kruise.io containerrecreaterequests",
            "watch apps.kruise.io containerrecreaterequests",
            "patch apps.kruise.io containerrecreaterequests/status",
            "list inplaced.io containerrestartrequests",
            "watch inplaced.io containerrestartrequests",
            "patch inplaced.io containerrestartrequests/status",
            "delete inplaced.io containerrestartrequests",
            "create core events",
            "patch core pods/status",
        ],
    );
    let not_allowed = |rules: &Value| -> Vec<String> {
        describe(
            &node
                .server
                .audit()
                .not_allowed_by(rules)
                .into_iter()
                .filter(|e| e.request.user == AGENT_USER)
                .collect::<Vec<_>>(),
        )
    };

    // The check has teeth: without the CRR status rule the status patches are reported.
    let mut stripped = cluster_roles("rbac-dedicated.yaml");
    for role in &mut stripped {
        role["rules"]
            .as_array_mut()
            .unwrap()
            .retain(|r| r["resources"] != json!(["containerrecreaterequests/status"]));
    }
    let denied = not_allowed(&Value::Array(stripped));
    assert!(
        denied
            .iter()
            .any(|d| d.starts_with("patch apps.kruise.io containerrecreaterequests/status")),
        "{denied:#?}"
    );
    node.stop().await;
}

/// Every request the agent made on `node` is granted by each shipped identity, and the run made
/// each of the `expected` requests (so the check covers them).
fn assert_granted(node: &Node, expected: &[&str]) {
    let audit = node.server.audit();
    let agent: Vec<_> = audit
        .entries()
        .into_iter()
        .filter(|e| e.request.user == AGENT_USER)
        .collect();
    let used = describe(&agent);
    for expected in expected {
        assert!(
            used.iter().any(|u| u.starts_with(expected)),
            "the scenario never made a `{expected}` request: {used:#?}"
        );
    }
    let not_allowed = |rules: &Value| -> Vec<String> {
        describe(
            &audit
                .not_allowed_by(rules)
                .into_iter()
                .filter(|e| e.request.user == AGENT_USER)
                .collect::<Vec<_>>(),
        )
    };

    // Dedicated identity: rbac-dedicated.yaml alone (plus what every authenticated user has).
    let mut dedicated = cluster_roles("rbac-dedicated.yaml");
    dedicated.extend(default_authenticated_rules());
    let denied = not_allowed(&Value::Array(dedicated));
    assert!(
        denied.is_empty(),
        "packaging/kubernetes/rbac-dedicated.yaml does not grant: {denied:#?}"
    );

    // Node-bound identity: the Node authorizer plus rbac-node-bound.yaml.
    let mut node_bound = cluster_roles("rbac-node-bound.yaml");
    node_bound.extend(node_authorizer_rules());
    node_bound.extend(default_authenticated_rules());
    let denied = not_allowed(&Value::Array(node_bound));
    assert!(
        denied.is_empty(),
        "packaging/kubernetes/rbac-node-bound.yaml and the Node authorizer do not grant: {denied:#?}"
    );
}

/// ContainerResizeRequests: the `cri` actuator (LimitRanges, request status, the Resized event,
/// deletion after ttlSecondsAfterFinished) on a kubelet 1.31 node, the `kubelet` actuator
/// (pods/resize) on a kubelet 1.35 node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn resize_requests_use_only_what_the_shipped_roles_grant() {
    for (release, expected) in [
        (
            "v1.31.12",
            &[
                "list inplaced.io containerresizerequests",
                "watch inplaced.io containerresizerequests",
                "patch inplaced.io containerresizerequests/status",
                "delete inplaced.io containerresizerequests",
                "list core limitranges",
                "create core events",
            ][..],
        ),
        ("v1.35.7", &["patch core pods/resize"][..]),
    ] {
        let node = Node::start_with(NodeOptions::kubelet(release)).await;
        let pod_name = unique("rbac-resize");
        let app = json!({"name": "app", "image": "localhost/busybox:local",
            "command": ["/bin/sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.1; done"],
            "resources": {"requests": {"cpu": "100m", "memory": "32Mi"},
                          "limits": {"cpu": "200m", "memory": "64Mi"}}});
        node.run_pod(&pod_name, json!({"containers": [app]})).await;
        let name = node
            .create_resize(json!({"podName": pod_name, "ttlSecondsAfterFinished": 0,
                "containers": [{"name": "app", "resources": {"limits": {"cpu": "300m"}}}]}))
            .await;
        // Gone once finished: the agent deleted it after its TTL.
        let deadline = std::time::Instant::now() + LONG;
        while node
            .server
            .store()
            .get("containerresizerequests", NS, &name)
            .is_some()
        {
            assert!(std::time::Instant::now() < deadline, "{name} never deleted");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let pod = node.pod(&pod_name).unwrap();
        if release == "v1.35.7" {
            assert_eq!(
                pod["spec"]["containers"][0]["resources"]["limits"]["cpu"],
                "300m"
            );
        }
        assert_granted(&node, expected);
        node.stop().await;
    }
}

/// Least privilege in the manifests themselves: no wildcards, no secrets, no verbs that change or
/// delete objects beyond the status patches, the event creation and the (future) resize patches.
#[test]
fn shipped_roles_have_no_wildcards_and_only_narrow_writes() {
    for file in ["rbac-dedicated.yaml", "rbac-node-bound.yaml"] {
        for role in cluster_roles(file) {
            for rule in role["rules"].as_array().unwrap() {
                let text = rule.to_string();
                assert!(!text.contains('*'), "{file}: wildcard in {text}");
                assert!(rule.get("nonResourceURLs").is_none(), "{file}: {text}");
                let resources: Vec<&str> = rule["resources"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| r.as_str().unwrap())
                    .collect();
                assert!(!resources.contains(&"secrets"), "{file}: {text}");
                for verb in rule["verbs"].as_array().unwrap() {
                    let verb = verb.as_str().unwrap();
                    let ok = match verb {
                        "list" | "watch" => true,
                        // The node's own NodeUpgradeCheck and Lease (the admission policy limits
                        // each to the one named after the node, and the namespace's leader Lease
                        // to the node's own name); a rollout's status (the policy: only while the
                        // node holds that Lease); a rollout's requests, read back by name.
                        "get" | "update" => {
                            resources == ["nodeupgradechecks"]
                                || resources == ["leases"]
                                || (verb == "update"
                                    && resources == ["containerrestartrollouts/status"])
                                || (verb == "get" && resources == ["containerrestartrequests"])
                        }
                        // Events, the node's NodeUpgradeCheck and Lease, and the requests a
                        // rollout makes for the node's own pods (the policy: labelled with it).
                        "create" => {
                            resources == ["events"]
                                || resources == ["nodeupgradechecks"]
                                || resources == ["leases"]
                                || resources == ["containerrestartrequests"]
                        }
                        // Finished ContainerResizeRequests and ContainerRestartRequests, after
                        // ttlSecondsAfterFinished.
                        "delete" => {
                            resources == ["containerresizerequests"]
                                || resources == ["containerrestartrequests"]
                        }
                        // Statuses, resizes, and a repeated event counted into the first
                        // (count, lastTimestamp), as the kubelet does.
                        "patch" => resources.iter().all(|r| {
                            r.ends_with("/status")
                                || *r == "pods/resize"
                                || *r == "pods"
                                || *r == "events"
                        }),
                        _ => false,
                    };
                    assert!(ok, "{file}: verb {verb} on {resources:?} is not needed");
                }
            }
        }
    }
}
