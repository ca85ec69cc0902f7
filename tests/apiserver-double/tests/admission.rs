//! ValidatingAdmissionPolicies enforced as kube-apiserver enforces them, with the policy
//! inplaced ships (`packaging/kubernetes/admission-policy.yaml`) applied as it is: each node's
//! identity may write only its own node's requests and pods, checked on the object as it was
//! and as it would be stored, only the holder of a namespace's Lease `inplaced-rollout-leader`
//! writes its rollouts' status, and a denial writes nothing. Params (`paramKind`, `paramRef`)
//! are also tried with policies of the tests' own.

mod common;

use apiserver_double::{ApiServer, VALIDATING_ADMISSION_POLICIES};
use common::*;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde::Deserialize as _;
use serde_json::{Value, json};

const POLICY: &str = "inplaced-own-node-requests";
const PODS_POLICY: &str = "inplaced-own-node-pods";
const CRR: &str = "containerrecreaterequests.apps.kruise.io";
const RESIZE: &str = "containerresizerequests.inplaced.io";
const RESTART: &str = "containerrestartrequests.inplaced.io";
const KRUISE_LABEL: &str = "crr.apps.kruise.io/node-name";
const INPLACED_LABEL: &str = "inplaced.io/node-name";

/// The shipped policy's documents, as `kubectl apply -f` reads them.
fn shipped_documents() -> Vec<Value> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../packaging/kubernetes/admission-policy.yaml"
    );
    let text = std::fs::read_to_string(path).expect("the shipped policy");
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).expect("a YAML document"))
        .filter(|doc| !doc.is_null())
        .collect()
}

/// Creates the shipped policy and binding over HTTP, typed as kube-rs knows them (so the
/// YAML is valid against the v1 schema too).
async fn apply_shipped_policy(server: &ApiServer) {
    let admin = client(server).await;
    let documents = shipped_documents();
    assert_eq!(
        documents.len(),
        9,
        "four policies, their bindings, and the rollout policy's second"
    );
    for doc in documents {
        match doc["kind"].as_str() {
            Some("ValidatingAdmissionPolicy") => {
                let policy: ValidatingAdmissionPolicy = typed(doc);
                Api::all(admin.clone())
                    .create(&PostParams::default(), &policy)
                    .await
                    .expect("the policy is created");
            }
            Some("ValidatingAdmissionPolicyBinding") => {
                let binding: ValidatingAdmissionPolicyBinding = typed(doc);
                Api::all(admin.clone())
                    .create(&PostParams::default(), &binding)
                    .await
                    .expect("the binding is created");
            }
            other => panic!("unexpected document {other:?}"),
        }
    }
}

/// A server with the shipped policy, and tokens for a kubelet-like node identity, a dedicated
/// agent identity, and a user outside both groups.
async fn cluster() -> ApiServer {
    let server = server().await;
    let tokens = server.tokens();
    tokens.add_with_groups("node-n1", "system:node:n1", &["system:nodes"], None);
    tokens.add_with_groups("agent-n1", "inplaced:node:n1", &["inplaced:agents"], None);
    tokens.add("alice", "alice", None);
    // The node's name without the node group: not the node authorizer's user.
    tokens.add("ungrouped-n1", "system:node:n1", None);
    apply_shipped_policy(&server).await;
    server
}

fn resource(group: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1alpha1", kind), plural)
}

fn request_resource(qualified: &str) -> ApiResource {
    match qualified {
        CRR => resource(
            "apps.kruise.io",
            "ContainerRecreateRequest",
            "containerrecreaterequests",
        ),
        RESIZE => resource(
            "inplaced.io",
            "ContainerResizeRequest",
            "containerresizerequests",
        ),
        RESTART => resource(
            "inplaced.io",
            "ContainerRestartRequest",
            "containerrestartrequests",
        ),
        other => panic!("no such request resource {other}"),
    }
}

fn request_object(qualified: &str, name: &str, label: &str, node: &str) -> Value {
    let ar = request_resource(qualified);
    json!({
        "apiVersion": ar.api_version,
        "kind": ar.kind,
        "metadata": {"name": name, "namespace": "default", "labels": {label: node}},
        "spec": {"podName": "web", "containers": [{"name": "app"}]},
    })
}

async fn requests(server: &ApiServer, token: &str, qualified: &str) -> Api<DynamicObject> {
    let client = client_for(server, Some(token)).await;
    Api::namespaced_with(client, "default", &request_resource(qualified))
}

/// The denial the shipped policy gives a write to another node's request.
fn denial(qualified: &str, name: &str, label: &str) -> String {
    format!(
        "{qualified} \"{name}\" is forbidden: ValidatingAdmissionPolicy '{POLICY}' with binding \
         '{POLICY}' denied request: node n1 may only modify requests labelled {label}=n1"
    )
}

/// The answer's code, reason and message, or panic.
fn refused<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> (u16, String, String) {
    match r {
        Err(kube::Error::Api(s)) => (s.code, s.reason.clone(), s.message.clone()),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn relabel(label: &str, node: &str) -> Patch<Value> {
    Patch::Merge(json!({"metadata": {"labels": {label: node}}}))
}

/// One identity's rights over one request resource: its own node's requests yes (create,
/// update, status, delete), another node's no, and moving a request between nodes neither way.
async fn own_requests_only(server: &ApiServer, token: &str, qualified: &str, label: &str) {
    let api = requests(server, token, qualified).await;
    let pp = PatchParams::default();
    let store = server.store();

    // Its own node's request: every write goes through.
    let mine: DynamicObject = typed(request_object(qualified, "mine", label, "n1"));
    api.create(&PostParams::default(), &mine)
        .await
        .expect("creates its own node's request");
    let spec = Patch::Merge(json!({"spec": {"containers": [{"name": "sidecar"}]}}));
    api.patch("mine", &pp, &spec)
        .await
        .expect("updates its own node's request");
    let status = Patch::Merge(json!({"status": {"phase": "Completed"}}));
    api.patch_status("mine", &pp, &status)
        .await
        .expect("updates its own node's request's status");
    api.delete("mine", &DeleteParams::default())
        .await
        .expect("deletes its own node's request");
    assert!(store.get(qualified, "default", "mine").is_none());

    // Another node's: refused, and nothing is written.
    let rv = store.resource_version();
    let theirs: DynamicObject = typed(request_object(qualified, "theirs", label, "n2"));
    let (code, reason, message) = refused(api.create(&PostParams::default(), &theirs).await);
    assert_eq!((code, reason.as_str()), (403, "Forbidden"), "{message}");
    assert_eq!(message, denial(qualified, "theirs", label));
    assert!(store.get(qualified, "default", "theirs").is_none());
    assert_eq!(
        store.resource_version(),
        rv,
        "a denied create writes nothing"
    );

    store
        .create(qualified, request_object(qualified, "theirs", label, "n2"))
        .expect("another node's request");
    store
        .create(qualified, request_object(qualified, "moving", label, "n1"))
        .expect("its own node's request");
    let before_theirs = store.get(qualified, "default", "theirs");
    let before_moving = store.get(qualified, "default", "moving");
    let rv = store.resource_version();
    for (name, write) in [
        // The old object is another node's: relabelling it onto n1 is no way in.
        (
            "theirs",
            api.patch("theirs", &pp, &relabel(label, "n1")).await,
        ),
        ("theirs", api.patch("theirs", &pp, &spec).await),
        ("theirs", api.patch_status("theirs", &pp, &status).await),
        // The new object would be another node's: no giving a request away.
        (
            "moving",
            api.patch("moving", &pp, &relabel(label, "n2")).await,
        ),
    ] {
        let (code, _, message) = refused(write);
        assert_eq!(code, 403, "{message}");
        assert_eq!(message, denial(qualified, name, label));
    }
    let (code, _, message) = refused(api.delete("theirs", &DeleteParams::default()).await);
    assert_eq!(code, 403, "{message}");
    assert_eq!(message, denial(qualified, "theirs", label));
    assert_eq!(store.get(qualified, "default", "theirs"), before_theirs);
    assert_eq!(store.get(qualified, "default", "moving"), before_moving);
    assert_eq!(
        store.resource_version(),
        rv,
        "denied writes write nothing, so no watch event"
    );
}

#[tokio::test]
async fn the_shipped_policy_and_binding_are_served_as_applied() {
    let server = cluster().await;
    let policies = Api::<ValidatingAdmissionPolicy>::all(client(&server).await);
    let policy = policies.get(POLICY).await.expect("the policy is served");
    let spec = policy.spec.expect("a spec");
    assert_eq!(spec.failure_policy.as_deref(), Some("Fail"));
    assert_eq!(spec.validations.map(|v| v.len()), Some(2));
    assert_eq!(
        server.store().list(VALIDATING_ADMISSION_POLICIES, "").len(),
        4
    );
    let bindings = Api::<ValidatingAdmissionPolicyBinding>::all(client(&server).await);
    let binding = bindings.get(POLICY).await.expect("the binding is served");
    assert_eq!(
        binding.spec.and_then(|s| s.validation_actions),
        Some(vec!["Deny".to_owned()])
    );
}

#[tokio::test]
async fn a_node_writes_only_its_own_nodes_recreate_requests() {
    let server = cluster().await;
    own_requests_only(&server, "node-n1", CRR, KRUISE_LABEL).await;
}

#[tokio::test]
async fn a_dedicated_agent_writes_only_its_own_nodes_resize_and_restart_requests() {
    let server = cluster().await;
    own_requests_only(&server, "agent-n1", RESIZE, INPLACED_LABEL).await;
    own_requests_only(&server, "agent-n1", RESTART, INPLACED_LABEL).await;
    // The kruise label does not count on inplaced's requests.
    let api = requests(&server, "agent-n1", RESIZE).await;
    let wrong: DynamicObject = typed(request_object(RESIZE, "wrong-label", KRUISE_LABEL, "n1"));
    let (code, _, message) = refused(api.create(&PostParams::default(), &wrong).await);
    assert_eq!(code, 403, "{message}");
}

#[tokio::test]
async fn a_node_updates_only_its_own_pods() {
    let server = cluster().await;
    let store = server.store();
    store.create("pods", pod("mine", "n1")).expect("pod on n1");
    store
        .create("pods", pod("theirs", "n2"))
        .expect("pod on n2");
    for token in ["node-n1", "agent-n1"] {
        let pods: Api<Pod> = Api::namespaced(client_for(&server, Some(token)).await, "default");
        let pp = PatchParams::default();
        let status = Patch::Merge(json!({"status": {"message": token}}));
        pods.patch_status("mine", &pp, &status)
            .await
            .expect("its own node's pod status");
        let labelled = Patch::Merge(json!({"metadata": {"labels": {"seen": "yes"}}}));
        pods.patch("mine", &pp, &labelled)
            .await
            .expect("its own node's pod");

        let before = store.get("pods", "default", "theirs");
        let rv = store.resource_version();
        let resize = Patch::Strategic(json!({"spec": {"containers": [{"name": "app",
            "resources": {"requests": {"cpu": "150m"}}}]}}));
        for write in [
            pods.patch_status("theirs", &pp, &status).await,
            pods.patch("theirs", &pp, &labelled).await,
            pods.patch_subresource("resize", "theirs", &pp, &resize)
                .await,
        ] {
            let (code, reason, message) = refused(write);
            assert_eq!((code, reason.as_str()), (403, "Forbidden"), "{message}");
            assert_eq!(
                message,
                format!(
                    "pods \"theirs\" is forbidden: ValidatingAdmissionPolicy '{PODS_POLICY}' with binding \
                     '{PODS_POLICY}' denied request: node n1 may only modify pods bound to it"
                )
            );
        }
        assert_eq!(store.get("pods", "default", "theirs"), before);
        assert_eq!(store.resource_version(), rv);
    }
    // Only updates are checked: creating and deleting pods is the kubelet's and NodeRestriction's.
    let pods: Api<Pod> = Api::namespaced(client_for(&server, Some("node-n1")).await, "default");
    pods.create(&PostParams::default(), &typed(pod("mirror", "n2")))
        .await
        .expect("create is not checked");
    pods.delete("theirs", &DeleteParams::default())
        .await
        .expect("delete is not checked");
}

#[tokio::test]
async fn users_outside_the_agent_groups_are_not_restricted() {
    let server = cluster().await;
    let store = server.store();
    store
        .create(CRR, request_object(CRR, "theirs", KRUISE_LABEL, "n2"))
        .expect("n2's request");
    store
        .create("pods", pod("theirs", "n2"))
        .expect("pod on n2");
    for token in ["alice", "ungrouped-n1"] {
        let api = requests(&server, token, CRR).await;
        let pp = PatchParams::default();
        let name = format!("new-{token}");
        let obj: DynamicObject = typed(request_object(CRR, &name, KRUISE_LABEL, "n2"));
        api.create(&PostParams::default(), &obj)
            .await
            .expect("creates any node's request");
        api.patch("theirs", &pp, &relabel(KRUISE_LABEL, "n3"))
            .await
            .expect("relabels any request");
        api.patch("theirs", &pp, &relabel(KRUISE_LABEL, "n2"))
            .await
            .expect("and back");
        api.delete(&name, &DeleteParams::default())
            .await
            .expect("deletes any request");
        let pods: Api<Pod> = Api::namespaced(client_for(&server, Some(token)).await, "default");
        pods.patch_status(
            "theirs",
            &pp,
            &Patch::Merge(json!({"status": {"message": token}})),
        )
        .await
        .expect("updates any pod's status");
    }
    // The audit log shows the groups the policy saw.
    let entry = server
        .audit()
        .entries()
        .into_iter()
        .rfind(|e| e.request.user == "alice")
        .expect("alice's requests are audited");
    assert_eq!(
        entry.request.groups,
        vec!["system:authenticated".to_owned()]
    );
}

/// A policy of the test's own, over HTTP: its failure policy decides what an expression that
/// does not compile or fails at run time does, and the server goes on serving.
async fn own_policy(server: &ApiServer, name: &str, failure: &str, expression: &str) {
    let admin = client(server).await;
    let policy: ValidatingAdmissionPolicy = typed(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": failure,
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "resources": ["nodes"], "operations": ["CREATE"]}]},
            "validations": [{"expression": expression}],
        },
    }));
    let binding: ValidatingAdmissionPolicyBinding = typed(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }));
    Api::<ValidatingAdmissionPolicy>::all(admin.clone())
        .create(&PostParams::default(), &policy)
        .await
        .expect("policy");
    Api::<ValidatingAdmissionPolicyBinding>::all(admin)
        .create(&PostParams::default(), &binding)
        .await
        .expect("binding");
}

#[tokio::test]
async fn failing_expressions_follow_the_failure_policy() {
    use k8s_openapi::api::core::v1::Node;
    let node = |name: &str| -> Node { typed(json!({"metadata": {"name": name}})) };
    let cases = [
        (
            "Fail",
            "object.metadata.name.(",
            Some("compilation error: "),
        ),
        ("Ignore", "object.metadata.name.(", None),
        (
            "Fail",
            "object.spec.nope == 'x'",
            Some("resulted in error: "),
        ),
        ("Ignore", "object.spec.nope == 'x'", None),
        (
            "Fail",
            "authorizer.group('').check('x').allowed()",
            Some("resulted in error: "),
        ),
    ];
    for (failure, expression, denied) in cases {
        let server = server().await;
        own_policy(&server, "checked", failure, expression).await;
        let nodes: Api<Node> = Api::all(client(&server).await);
        let created = nodes.create(&PostParams::default(), &node("n9")).await;
        match denied {
            None => {
                created.expect("ignored");
            }
            Some(part) => {
                let (code, reason, message) = refused(created);
                assert_eq!((code, reason.as_str()), (422, "Invalid"), "{message}");
                assert!(
                    message.starts_with(
                        "nodes \"n9\" is forbidden: ValidatingAdmissionPolicy 'checked' with \
                         binding 'checked' denied request: "
                    ) && message.contains(part),
                    "{failure} {expression}: {message}"
                );
            }
        }
        // Still serving.
        nodes.list(&Default::default()).await.expect("lists");
    }
}

fn upgrade_check(name: &str, labelled: &str) -> Value {
    json!({
        "apiVersion": "inplaced.io/v1alpha1",
        "kind": "NodeUpgradeCheck",
        "metadata": {"name": name, "labels": {INPLACED_LABEL: labelled}},
        "status": {"kubeletVersion": "v1.32.4", "targets": []},
    })
}

/// A node's agent writes only the NodeUpgradeCheck named after its node and labelled with it:
/// not another node's, not one named after another node, not one relabelled.
#[tokio::test]
async fn a_node_writes_only_its_own_nodes_upgrade_check() {
    let server = cluster().await;
    let kind = resource("inplaced.io", "NodeUpgradeCheck", "nodeupgradechecks");
    for token in ["node-n1", "agent-n1"] {
        let api: Api<DynamicObject> = Api::all_with(client_for(&server, Some(token)).await, &kind);
        let mine: DynamicObject = typed(upgrade_check("n1", "n1"));
        let created = api
            .create(&PostParams::default(), &mine)
            .await
            .expect("its own node's NodeUpgradeCheck");
        let mut replaced = created.clone();
        replaced.data["status"]["kubeletVersion"] = json!("v1.33.0");
        api.replace("n1", &PostParams::default(), &replaced)
            .await
            .expect("updates its own");
        for (name, labelled) in [("n2", "n2"), ("n2", "n1"), ("n1-copy", "n1")] {
            let theirs: DynamicObject = typed(upgrade_check(name, labelled));
            let (code, _, message) = refused(api.create(&PostParams::default(), &theirs).await);
            assert_eq!(code, 403, "{name} labelled {labelled}: {message}");
        }
        server
            .store()
            .create("nodeupgradechecks.inplaced.io", upgrade_check("n2", "n2"))
            .expect("another node's");
        let theirs = server
            .store()
            .get("nodeupgradechecks.inplaced.io", "", "n2")
            .expect("stored");
        let before = theirs.clone();
        let mut changed: DynamicObject = typed(theirs);
        changed.data["status"]["kubeletVersion"] = json!("v1.20.0");
        let (code, _, _) = refused(api.replace("n2", &PostParams::default(), &changed).await);
        assert_eq!(code, 403);
        assert_eq!(
            server
                .store()
                .get("nodeupgradechecks.inplaced.io", "", "n2"),
            Some(before)
        );
        for name in ["n1", "n2"] {
            let _ = server
                .store()
                .delete("nodeupgradechecks.inplaced.io", "", name);
        }
    }
}

const ROLLOUTS: &str = "containerrestartrollouts.inplaced.io";
const ROLLOUT_POLICY: &str = "inplaced-rollout-status-by-leader";
/// The rollout policy's binding for the rollout itself (no params).
const ROLLOUT_ITSELF: &str = "inplaced-rollout-status-by-leader-rollout";
const LEADER_LEASE: &str = "inplaced-rollout-leader";
const LEASES: &str = "leases.coordination.k8s.io";

fn rollout_resource() -> ApiResource {
    resource(
        "inplaced.io",
        "ContainerRestartRollout",
        "containerrestartrollouts",
    )
}

fn part(node: &str, claims: &[&str], skipped: u32) -> Value {
    let claims: Vec<Value> = claims
        .iter()
        .map(|p| json!({"pod": p, "podUID": format!("uid-{p}"), "since": "2026-11-29T08:00:00Z"}))
        .collect();
    json!({"node": node, "claims": claims, "skipped": skipped})
}

/// `status.nodes` as the API has it: the parts by node name.
fn by_node(parts: Vec<Value>) -> Value {
    let mut map = serde_json::Map::new();
    for mut part in parts {
        let node = part["node"]
            .as_str()
            .expect("a part names its node")
            .to_string();
        if let Some(fields) = part.as_object_mut() {
            fields.remove("node");
        }
        map.insert(node, part);
    }
    Value::Object(map)
}

/// A rollout with parts for n1 and n2, stored as a user made it and its leader wrote it.
fn stored_rollout(server: &ApiServer) -> Value {
    let store = server.store();
    let _ = store.delete(ROLLOUTS, "default", "web");
    store
        .create(
            ROLLOUTS,
            json!({
                "apiVersion": "inplaced.io/v1alpha1",
                "kind": "ContainerRestartRollout",
                "metadata": {"name": "web", "namespace": "default"},
                "spec": {"selector": {"matchLabels": {"app": "web"}}},
            }),
        )
        .expect("the rollout");
    let mut object = store.get(ROLLOUTS, "default", "web").expect("stored");
    object["status"] = json!({
        "phase": "Progressing",
        "inProgress": 2,
        "nodes": by_node(vec![part("n1", &["a"], 0), part("n2", &["b", "c"], 1)]),
    });
    store.replace(ROLLOUTS, object).expect("its status")
}

/// The namespace's leader Lease held by `holder` (none: the Lease deleted), written directly.
fn leader(server: &ApiServer, namespace: &str, holder: Option<&str>) {
    let store = server.store();
    let _ = store.delete(LEASES, namespace, LEADER_LEASE);
    if let Some(holder) = holder {
        store
            .create(
                LEASES,
                json!({
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": LEADER_LEASE, "namespace": namespace},
                    "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15},
                }),
            )
            .expect("the leader Lease");
    }
}

/// The rollout as `stored_rollout` makes it, with `status.nodes` as given and a summary field
/// changed, written by `token` through the status subresource.
async fn write_parts(
    server: &ApiServer,
    token: &str,
    parts: Vec<Value>,
) -> Result<DynamicObject, kube::Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(
        client_for(server, Some(token)).await,
        "default",
        &rollout_resource(),
    );
    stored_rollout(server);
    let stored = server
        .store()
        .get(ROLLOUTS, "default", "web")
        .expect("stored");
    let mut object: DynamicObject = typed(stored);
    object.data["status"]["nodes"] = by_node(parts);
    object.data["status"]["inProgress"] = json!(7);
    api.replace_status("web", &PostParams::default(), &object)
        .await
}

/// The status write of `write_parts` was refused and wrote nothing.
#[track_caller]
fn nothing_written(server: &ApiServer) {
    let after = server
        .store()
        .get(ROLLOUTS, "default", "web")
        .expect("kept");
    assert_eq!(after["status"]["inProgress"], 2, "nothing written");
}

/// kube-apiserver's denial when a binding with `parameterNotFoundAction: Deny` finds no param.
fn no_leader_lease(binding: &str) -> String {
    format!(
        "{ROLLOUTS} \"web\" is forbidden: ValidatingAdmissionPolicy '{ROLLOUT_POLICY}' with binding \
         '{binding}' denied request: failed to configure binding: no params found for policy \
         binding with `Deny` parameterNotFoundAction"
    )
}

/// Only the node that holds the namespace's Lease inplaced-rollout-leader writes a rollout's
/// status, and then any of it (every node's part); another node is refused, and with no Lease
/// every status write is; no agent writes the rollout itself.
#[tokio::test]
async fn only_the_leader_lease_holder_writes_a_rollouts_status() {
    let server = cluster().await;
    let not_holder = format!(
        "{ROLLOUTS} \"web\" is forbidden: ValidatingAdmissionPolicy '{ROLLOUT_POLICY}' with binding \
         '{ROLLOUT_POLICY}' denied request: node n1 may write a rollout's status only while it \
         holds the Lease inplaced-rollout-leader of the namespace"
    );
    for token in ["node-n1", "agent-n1"] {
        leader(&server, "default", Some("n1"));
        // The leader writes every part: its own, another node's, a part added and one dropped.
        for parts in [
            vec![part("n1", &["a", "e"], 1), part("n2", &["b", "c"], 1)],
            vec![part("n1", &["a"], 0), part("n2", &["b", "c", "x"], 2)],
            vec![part("n1", &["a"], 0)],
            vec![
                part("n1", &["a"], 0),
                part("n2", &["b", "c"], 1),
                part("n3", &["z"], 0),
            ],
        ] {
            let written = write_parts(&server, token, parts.clone())
                .await
                .unwrap_or_else(|e| panic!("{token}, the leader, writes {parts:?}: {e}"));
            assert_eq!(written.data["status"]["inProgress"], 7);
        }

        // Another node holds the Lease: refused by the rule, whatever the write.
        leader(&server, "default", Some("n2"));
        for parts in [
            vec![part("n1", &["a", "e"], 1), part("n2", &["b", "c"], 1)],
            vec![part("n1", &["a"], 0), part("n2", &["b", "c"], 1)],
        ] {
            let (code, reason, said) = refused(write_parts(&server, token, parts).await);
            assert_eq!((code, reason.as_str()), (403, "Forbidden"), "{said}");
            assert_eq!(said, not_holder);
            nothing_written(&server);
        }
        // A Lease with no holder (released) is held by no one.
        let store = server.store();
        let mut released = store
            .get(LEASES, "default", LEADER_LEASE)
            .expect("the Lease");
        released["spec"]
            .as_object_mut()
            .unwrap()
            .remove("holderIdentity");
        store.replace(LEASES, released).expect("released");
        let (code, _, said) = refused(write_parts(&server, token, vec![]).await);
        assert_eq!((code, said.as_str()), (403, not_holder.as_str()));

        // No Lease in the rollout's namespace (one elsewhere does not count): no param, so the
        // binding refuses with kube-apiserver's configuration error.
        leader(&server, "default", None);
        leader(&server, "elsewhere", Some("n1"));
        let (code, reason, said) = refused(write_parts(&server, token, vec![]).await);
        assert_eq!((code, reason.as_str()), (422, "Invalid"), "{said}");
        assert_eq!(said, no_leader_lease(ROLLOUT_POLICY));
        nothing_written(&server);

        // The rollout itself, even as the leader: neither its spec, nor a new one, nor its
        // deletion (the rollout binding, without params).
        leader(&server, "default", Some("n1"));
        stored_rollout(&server);
        let api: Api<DynamicObject> = Api::namespaced_with(
            client_for(&server, Some(token)).await,
            "default",
            &rollout_resource(),
        );
        let itself = format!(
            "{ROLLOUTS} \"web\" is forbidden: ValidatingAdmissionPolicy '{ROLLOUT_POLICY}' with \
             binding '{ROLLOUT_ITSELF}' denied request: node n1 may only write the status of a \
             ContainerRestartRollout"
        );
        let (code, _, said) = refused(
            api.patch(
                "web",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"paused": true}})),
            )
            .await,
        );
        assert_eq!((code, said.as_str()), (403, itself.as_str()));
        let (code, _, said) = refused(api.delete("web", &DeleteParams::default()).await);
        assert_eq!((code, said.as_str()), (403, itself.as_str()));
        let mut new: DynamicObject = typed(stored_rollout(&server));
        new.metadata.name = Some("new".into());
        new.metadata.resource_version = None;
        new.metadata.uid = None;
        let (code, _, said) = refused(api.create(&PostParams::default(), &new).await);
        assert_eq!(
            (code, said),
            (403, itself.replace("\"web\"", "\"new\"")),
            "creating a rollout"
        );
    }
}

/// The Lease is read as each write is admitted: a change of holder counts from the next write.
#[tokio::test]
async fn a_change_of_leader_counts_from_the_next_write() {
    let server = cluster().await;
    leader(&server, "default", Some("n1"));
    write_parts(&server, "agent-n1", vec![])
        .await
        .expect("n1 leads");
    let store = server.store();
    for (holder, admitted) in [("n2", false), ("n1", true)] {
        let mut lease = store
            .get(LEASES, "default", LEADER_LEASE)
            .expect("the Lease");
        lease["spec"]["holderIdentity"] = json!(holder);
        store.replace(LEASES, lease).expect("a new holder");
        let written = write_parts(&server, "agent-n1", vec![]).await;
        assert_eq!(written.is_ok(), admitted, "{holder} holds: {written:?}");
    }
}

/// A user is not an agent: the rollout is theirs to make, change and delete, with or without a
/// leader Lease; its status too while the Lease exists. Without it their status write is
/// refused as the agents' is: kube-apiserver reads the binding's params before its match
/// conditions.
#[tokio::test]
async fn a_user_writes_rollouts_and_their_status_where_a_lease_exists() {
    let server = cluster().await;
    let alice: Api<DynamicObject> = Api::namespaced_with(
        client_for(&server, Some("alice")).await,
        "default",
        &rollout_resource(),
    );
    let pause = Patch::Merge(json!({"spec": {"paused": true}}));
    for holder in [None, Some("n2")] {
        leader(&server, "default", holder);
        let mut new: DynamicObject = typed(stored_rollout(&server));
        new.metadata.name = Some("mine".into());
        new.metadata.resource_version = None;
        new.metadata.uid = None;
        alice
            .create(&PostParams::default(), &new)
            .await
            .expect("a user creates a rollout");
        alice
            .patch("mine", &PatchParams::default(), &pause)
            .await
            .expect("a user pauses a rollout");
        alice
            .delete("mine", &DeleteParams::default())
            .await
            .expect("a user deletes a rollout");
    }
    write_parts(&server, "alice", vec![part("n3", &[], 0)])
        .await
        .expect("a user writes the status while n2 leads");
    leader(&server, "default", None);
    let (code, _, said) = refused(write_parts(&server, "alice", vec![part("n3", &[], 0)]).await);
    assert_eq!((code, said), (422, no_leader_lease(ROLLOUT_POLICY)));
}

fn lease(name: &str, holder: &str) -> k8s_openapi::api::coordination::v1::Lease {
    typed(json!({"metadata": {"name": name},
                 "spec": {"holderIdentity": holder, "leaseDurationSeconds": 40}}))
}

/// A dedicated agent holds only the Lease named after its node, and the namespace's leader Lease
/// only in its own name; the policy leaves the node-bound identity's Leases alone: that is the
/// kubelet's own, which NodeRestriction keeps to its node (the double has no NodeRestriction),
/// and which a refusal would stop renewing.
#[tokio::test]
async fn a_node_writes_only_its_own_lease_and_takes_the_leader_lease_in_its_own_name() {
    use k8s_openapi::api::coordination::v1::Lease;
    let server = cluster().await;
    let denied = "node n1 may only write the Lease inplaced-agent-n1, and the Lease \
                  inplaced-rollout-leader only in its own name";
    let leases: Api<Lease> =
        Api::namespaced(client_for(&server, Some("agent-n1")).await, "default");
    let pp = PostParams::default();
    let created = leases
        .create(&pp, &lease("inplaced-agent-n1", "n1"))
        .await
        .expect("its own Lease");
    leases
        .replace("inplaced-agent-n1", &pp, &created)
        .await
        .expect("renewed");
    for (name, holder) in [
        ("inplaced-agent-n2", "n1"),
        ("some-lease", "n1"),
        (LEADER_LEASE, "n2"),
    ] {
        let (code, _, said) = refused(leases.create(&pp, &lease(name, holder)).await);
        assert_eq!(code, 403, "{name} for {holder}: {said}");
        assert!(said.ends_with(denied), "{said}");
    }
    leases
        .delete("inplaced-agent-n1", &DeleteParams::default())
        .await
        .expect("deleted");

    // The leader Lease: taken in its own name, renewed, handed to another node no.
    let taken = leases
        .create(&pp, &lease(LEADER_LEASE, "n1"))
        .await
        .expect("takes the leader Lease");
    let renewed = leases
        .replace(LEADER_LEASE, &pp, &taken)
        .await
        .expect("renews it");
    let mut handed = renewed.clone();
    handed.spec.as_mut().unwrap().holder_identity = Some("n2".into());
    let (code, _, said) = refused(leases.replace(LEADER_LEASE, &pp, &handed).await);
    assert_eq!(code, 403, "{said}");
    let mut released = renewed.clone();
    released.spec.as_mut().unwrap().holder_identity = None;
    let (code, _, said) = refused(leases.replace(LEADER_LEASE, &pp, &released).await);
    assert_eq!(code, 403, "released without a holder: {said}");
    leases
        .delete(LEADER_LEASE, &DeleteParams::default())
        .await
        .expect("its holder deletes it");

    // Another node's leader Lease: taken over in its own name (whether it had expired is the
    // agents' to judge), but neither renewed for that node nor deleted.
    leader(&server, "default", Some("n2"));
    let theirs: Lease = typed(
        server
            .store()
            .get(LEASES, "default", LEADER_LEASE)
            .expect("n2's"),
    );
    let (code, _, _) = refused(leases.replace(LEADER_LEASE, &pp, &theirs).await);
    assert_eq!(code, 403, "renewing n2's Lease");
    let (code, _, _) = refused(leases.delete(LEADER_LEASE, &DeleteParams::default()).await);
    assert_eq!(code, 403, "deleting n2's Lease");
    let mut taken_over = theirs.clone();
    taken_over.spec.as_mut().unwrap().holder_identity = Some("n1".into());
    leases
        .replace(LEADER_LEASE, &pp, &taken_over)
        .await
        .expect("takes the leader Lease over");

    // The kubelet's node Lease, written with the node-bound identity.
    let node_leases: Api<Lease> = Api::namespaced(
        client_for(&server, Some("node-n1")).await,
        "kube-node-lease",
    );
    let heartbeat = node_leases
        .create(&pp, &lease("n1", "n1"))
        .await
        .expect("the kubelet's node Lease");
    node_leases
        .replace("n1", &pp, &heartbeat)
        .await
        .expect("the kubelet's node Lease renewed");
}

// Params with policies of the tests' own: a pod's name must start with the `holderIdentity`
// of a Lease (any served kind would do), found by name or selector.

/// A Lease `name` in `namespace`, labelled `labels`, whose holder is `prefix`.
fn param(server: &ApiServer, namespace: &str, name: &str, prefix: &str, labels: Value) {
    let store = server.store();
    let _ = store.delete(LEASES, namespace, name);
    store
        .create(
            LEASES,
            json!({
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": name, "namespace": namespace, "labels": labels},
                "spec": {"holderIdentity": prefix},
            }),
        )
        .expect("a param");
}

/// The policy `prefixed` (pods created must be named with their param's prefix, which
/// `matchConditions` may also read) and its binding `prefixed` with `param_ref`.
async fn prefix_policy(server: &ApiServer, param_kind: Value, param_ref: Value, condition: &str) {
    let admin = client(server).await;
    let policy: ValidatingAdmissionPolicy = typed(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "prefixed"},
        "spec": {
            "failurePolicy": "Fail",
            "paramKind": param_kind,
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "resources": ["pods", "nodes"], "operations": ["CREATE"]}]},
            "matchConditions": [{"name": "condition", "expression": condition}],
            "validations": [{
                "expression": "params != null && object.metadata.name.startsWith(params.spec.holderIdentity)",
                "messageExpression": "'names start with ' + params.spec.holderIdentity + ' (' + params.kind + ' ' + params.metadata.name + ')'",
                "reason": "Forbidden",
            }],
        },
    }));
    let mut spec = json!({"policyName": "prefixed", "validationActions": ["Deny"]});
    if !param_ref.is_null() {
        spec["paramRef"] = param_ref;
    }
    let binding: ValidatingAdmissionPolicyBinding = typed(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "prefixed"},
        "spec": spec,
    }));
    Api::<ValidatingAdmissionPolicy>::all(admin.clone())
        .create(&PostParams::default(), &policy)
        .await
        .expect("policy");
    Api::<ValidatingAdmissionPolicyBinding>::all(admin)
        .create(&PostParams::default(), &binding)
        .await
        .expect("binding");
}

fn lease_kind() -> Value {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease"})
}

/// Creates pod `name` in `namespace` as the administrator: `Ok` or the refusal's code and message.
async fn create_pod(server: &ApiServer, namespace: &str, name: &str) -> Result<(), (u16, String)> {
    let pods: Api<Pod> = Api::namespaced(client(server).await, namespace);
    let mut object = pod(name, "n1");
    object["metadata"]["namespace"] = json!(namespace);
    match pods.create(&PostParams::default(), &typed(object)).await {
        Ok(_) => Ok(()),
        Err(e) => {
            let (code, _, message) = refused::<()>(Err(e));
            Err((code, message))
        }
    }
}

fn prefix_denial(name: &str, message: &str) -> (u16, String) {
    (
        403,
        format!(
            "pods \"{name}\" is forbidden: ValidatingAdmissionPolicy 'prefixed' with binding \
             'prefixed' denied request: {message}"
        ),
    )
}

const NOT_FOUND_DENY: &str = "failed to configure binding: no params found for policy binding \
                              with `Deny` parameterNotFoundAction";

#[tokio::test]
async fn a_param_by_name_is_read_in_the_objects_namespace_as_each_write_is_admitted() {
    let server = server().await;
    param(&server, "default", "prefix", "web", json!({}));
    param(&server, "other", "prefix", "db", json!({}));
    prefix_policy(
        &server,
        lease_kind(),
        json!({"name": "prefix", "parameterNotFoundAction": "Deny"}),
        "true",
    )
    .await;
    assert_eq!(create_pod(&server, "default", "web-1").await, Ok(()));
    assert_eq!(
        create_pod(&server, "default", "db-1").await,
        Err(prefix_denial("db-1", "names start with web (Lease prefix)"))
    );
    assert_eq!(create_pod(&server, "other", "db-1").await, Ok(()));
    assert_eq!(
        create_pod(&server, "other", "web-2").await,
        Err(prefix_denial("web-2", "names start with db (Lease prefix)"))
    );
    // No param in the namespace: the binding's configuration error (422, reason Invalid).
    let (code, message) = create_pod(&server, "third", "web-3").await.unwrap_err();
    assert_eq!(
        (code, message),
        (
            422,
            format!(
                "pods \"web-3\" is forbidden: ValidatingAdmissionPolicy 'prefixed' with binding \
                 'prefixed' denied request: {NOT_FOUND_DENY}"
            )
        )
    );
    // The param changed: the next write is judged by the new one.
    param(&server, "default", "prefix", "db", json!({}));
    assert_eq!(create_pod(&server, "default", "db-2").await, Ok(()));
    assert!(create_pod(&server, "default", "web-4").await.is_err());
    // And once it is deleted, nothing passes there.
    server
        .store()
        .delete(LEASES, "default", "prefix")
        .expect("deleted");
    let (code, message) = create_pod(&server, "default", "db-3").await.unwrap_err();
    assert_eq!(code, 422);
    assert!(message.ends_with(NOT_FOUND_DENY), "{message}");
}

#[tokio::test]
async fn no_param_found_is_allowed_with_allow() {
    let server = server().await;
    prefix_policy(
        &server,
        lease_kind(),
        json!({"name": "prefix", "parameterNotFoundAction": "Allow"}),
        "true",
    )
    .await;
    assert_eq!(create_pod(&server, "default", "anything").await, Ok(()));
    param(&server, "default", "prefix", "web", json!({}));
    assert!(
        create_pod(&server, "default", "anything-else")
            .await
            .is_err(),
        "found, the param counts"
    );
}

/// The params are collected before the match conditions run (which may read them): a missing
/// param with Deny refuses even a request the conditions would leave out.
#[tokio::test]
async fn params_are_collected_before_the_match_conditions() {
    let server = server().await;
    prefix_policy(
        &server,
        lease_kind(),
        json!({"name": "prefix", "parameterNotFoundAction": "Deny"}),
        "params.spec.holderIdentity != 'skip'",
    )
    .await;
    let (code, message) = create_pod(&server, "default", "x").await.unwrap_err();
    assert_eq!(code, 422);
    assert!(message.ends_with(NOT_FOUND_DENY), "{message}");
    param(&server, "default", "prefix", "skip", json!({}));
    assert_eq!(
        create_pod(&server, "default", "x").await,
        Ok(()),
        "the condition read the param"
    );
}

#[tokio::test]
async fn a_param_namespace_and_a_selector() {
    // paramRef.namespace: the param there, whatever the object's namespace.
    let server = server().await;
    param(&server, "params", "prefix", "web", json!({}));
    prefix_policy(
        &server,
        lease_kind(),
        json!({"name": "prefix", "namespace": "params", "parameterNotFoundAction": "Deny"}),
        "true",
    )
    .await;
    assert_eq!(create_pod(&server, "default", "web-1").await, Ok(()));
    assert!(create_pod(&server, "default", "db-1").await.is_err());

    // A selector: every param it selects in the namespace must pass.
    let server = common::server().await;
    param(&server, "default", "a", "web", json!({"role": "prefix"}));
    param(&server, "default", "b", "we", json!({"role": "prefix"}));
    param(&server, "default", "c", "db", json!({"role": "other"}));
    param(&server, "other", "d", "db", json!({"role": "prefix"}));
    prefix_policy(
        &server,
        lease_kind(),
        json!({"selector": {"matchLabels": {"role": "prefix"}}, "parameterNotFoundAction": "Deny"}),
        "true",
    )
    .await;
    assert_eq!(create_pod(&server, "default", "web-1").await, Ok(()));
    assert_eq!(
        create_pod(&server, "default", "we-1").await,
        Err(prefix_denial("we-1", "names start with web (Lease a)"))
    );
    assert_eq!(create_pod(&server, "other", "db-1").await, Ok(()));
    let (code, message) = create_pod(&server, "third", "db-1").await.unwrap_err();
    assert_eq!(code, 422);
    assert!(message.ends_with(NOT_FOUND_DENY), "selects none: {message}");
}

#[tokio::test]
async fn params_configuration_errors() {
    let node = |name: &str| -> k8s_openapi::api::core::v1::Node {
        typed(json!({"metadata": {"name": name}}))
    };
    // A namespaced param without a namespace, for a cluster-scoped object.
    let server = server().await;
    prefix_policy(
        &server,
        lease_kind(),
        json!({"name": "prefix", "parameterNotFoundAction": "Deny"}),
        "true",
    )
    .await;
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client(&server).await);
    let (code, reason, message) = refused(nodes.create(&PostParams::default(), &node("n9")).await);
    assert_eq!((code, reason.as_str()), (422, "Invalid"));
    assert_eq!(
        message,
        "nodes \"n9\" is forbidden: ValidatingAdmissionPolicy 'prefixed' with binding 'prefixed' \
         denied request: failed to configure binding: cannot use namespaced paramRef in policy \
         binding that matches cluster-scoped resources"
    );

    // A paramKind no resource serves: the policy's configuration error.
    let server = common::server().await;
    prefix_policy(
        &server,
        json!({"apiVersion": "example.com/v1", "kind": "Nope"}),
        json!({"name": "prefix", "parameterNotFoundAction": "Allow"}),
        "true",
    )
    .await;
    let (code, message) = create_pod(&server, "default", "web-1").await.unwrap_err();
    assert_eq!(
        (code, message.as_str()),
        (
            422,
            "pods \"web-1\" is forbidden: ValidatingAdmissionPolicy 'prefixed' denied request: \
             failed to configure policy: failed to find resource referenced by paramKind: \
             'example.com/v1, Kind=Nope'"
        )
    );

    // A binding without paramRef: the policy is evaluated with a null params.
    let server = common::server().await;
    prefix_policy(&server, lease_kind(), Value::Null, "true").await;
    let (code, message) = create_pod(&server, "default", "web-1").await.unwrap_err();
    // The message expression fails on a null params: the expression stands for the message.
    assert_eq!(code, 403);
    assert!(
        message.ends_with(
            "denied request: failed expression: params != null && \
             object.metadata.name.startsWith(params.spec.holderIdentity)"
        ),
        "{message}"
    );
}
