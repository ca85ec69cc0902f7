//! The shipped admission policies on a real kube-apiserver: type-checked, within its CEL cost
//! limits, and refusing what the docs say they refuse, to the identity they target.

mod support;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, ResourceExt,
};
use real_cluster::{ControlPlane, ControlPlaneConfig, NEWEST, wait_until};
use serde_json::{Value, json};
use support::real::*;

/// The policies `names` once the status controller has type-checked their current generation.
async fn checked(cluster: &ControlPlane, names: &[String]) -> Vec<Value> {
    wait_until("the policies' type-checking status", WAIT, || {
        let names = names.to_vec();
        let output = cluster.kubectl_run(&["get", "validatingadmissionpolicies", "-o=json"]);
        async move {
            let all: Value = serde_json::from_str(&output?)?;
            let checked: Vec<Value> = all["items"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(|p| {
                    names.iter().any(|n| p["metadata"]["name"] == n.as_str())
                        && p["status"]["observedGeneration"] == p["metadata"]["generation"]
                        && p["status"].get("typeChecking").is_some()
                })
                .collect();
            Ok((checked.len() == names.len()).then_some(checked))
        }
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the real Kubernetes binaries: run tests/run-all.sh"]
async fn every_shipped_admission_policy_is_type_checked_without_warnings() {
    let cluster = ControlPlane::start(ControlPlaneConfig::new(NEWEST))
        .await
        .unwrap();
    apply_shipped(&cluster, "rbac-dedicated.yaml");

    // The type checker skips a rule whose apiVersions is "*": every rule names its versions.
    let policies: Value = serde_json::from_str(&kubectl(
        &cluster,
        &[
            "get",
            "validatingadmissionpolicies",
            "-l=app.kubernetes.io/name=inplaced",
            "-o=json",
        ],
    ))
    .unwrap();
    let names: Vec<String> = policies["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert!(names.len() >= 2, "the shipped policies: {names:?}");
    for policy in policies["items"].as_array().unwrap() {
        for rule in policy["spec"]["matchConstraints"]["resourceRules"]
            .as_array()
            .unwrap()
        {
            assert!(
                !rule["apiVersions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|v| v == "*"),
                "{}: a rule with apiVersions \"*\" is never type-checked: {rule}",
                policy["metadata"]["name"]
            );
        }
    }

    // A policy that must draw a warning shows that the checker runs on these kinds here: a
    // ContainerRecreateRequest has no spec.nodeName. The checker reads the CRDs' schemas from
    // the apiserver's OpenAPI, which lags their being established: a policy checked before that
    // gets no warning at all (CI met it). So the control policy is made again until it warns,
    // and only then are the shipped policies made again, to be checked with the schemas known.
    let control = cluster.dir().join("control-policy.json");
    std::fs::write(
        &control,
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "inplaced-test-checker-runs"},
            "spec": {
                "matchConstraints": {"resourceRules": [{
                    "apiGroups": ["apps.kruise.io"], "apiVersions": ["v1alpha1"],
                    "resources": ["containerrecreaterequests"], "operations": ["CREATE"],
                }]},
                "validations": [{"expression": "object.spec.nodeName == ''"}],
            },
        })
        .to_string(),
    )
    .unwrap();
    let control_arg = format!("-f={}", control.display());
    let mut control_status = Value::Null;
    for _ in 0..10 {
        kubectl(&cluster, &["apply", "--server-side", &control_arg]);
        control_status = checked(&cluster, &["inplaced-test-checker-runs".to_string()])
            .await
            .remove(0);
        let warned = control_status["status"]["typeChecking"]["expressionWarnings"]
            .as_array()
            .is_some_and(|w| !w.is_empty());
        if warned {
            break;
        }
        kubectl(&cluster, &["delete", &control_arg]);
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    }
    assert!(
        control_status["status"]["typeChecking"]["expressionWarnings"]
            .as_array()
            .is_some_and(|w| !w.is_empty()),
        "the type checker found nothing wrong in a policy that reads a field CRRs do not have, \
         ten times: it does not check: {:#}",
        control_status["status"]
    );
    let shipped_policies = format!("-f={}", shipped("admission-policy.yaml").display());
    kubectl(&cluster, &["delete", &shipped_policies]);
    kubectl(&cluster, &["apply", "--server-side", &shipped_policies]);
    let statuses = checked(&cluster, &names).await;
    let warnings: Vec<String> = statuses
        .iter()
        .flat_map(|p| {
            p["status"]["typeChecking"]["expressionWarnings"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(move |w| format!("{}: {w}", p["metadata"]["name"]))
        })
        .collect();
    assert!(
        warnings.is_empty(),
        "type-checking warnings:\n{}",
        warnings.join("\n")
    );
}

/// `count` nodes' parts of a rollout, each with two claims and some counts.
fn parts(count: usize, since: &str) -> Value {
    let mut nodes = serde_json::Map::new();
    for i in 0..count {
        let claims: Vec<Value> = (0..2)
            .map(|c| json!({"pod": format!("web-{i}-{c}"), "podUID": format!("uid-{i}-{c}"), "since": since}))
            .collect();
        nodes.insert(
            format!("node-{i}"),
            json!({"skipped": 3, "claims": claims, "failures": []}),
        );
    }
    Value::Object(nodes)
}

/// The rollout policy on a real apiserver, with a rollout of 1000 nodes' parts: its rule reads
/// the namespace's leader Lease and not the parts, so the holder's write of the whole status
/// (its own part changed and a claim of another node released) is admitted, and another node's
/// is refused by the rule's message, not by a CEL cost limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the real Kubernetes binaries: run tests/run-all.sh"]
async fn the_rollout_policy_admits_the_leaders_write_and_refuses_another_nodes_at_1000_nodes() {
    let mut config = ControlPlaneConfig::new(NEWEST);
    config.controllers.clear();
    let cluster = ControlPlane::start(config).await.unwrap();
    apply_shipped(&cluster, "rbac-dedicated.yaml");
    kubectl(&cluster, &["create", "namespace", NS]);
    let admin = cluster.admin_client().await.unwrap();
    let agent = real_cluster::client_from(
        &cluster
            .kubeconfig_for(
                "agent-node-0.kubeconfig",
                "inplaced:node:node-0",
                Some("inplaced:agents"),
            )
            .unwrap(),
    )
    .await
    .unwrap();
    // Otherwise the refused write could be admitted by an apiserver that has not loaded the
    // policy yet, and the admitted one would say nothing of its cost.
    until_the_policies_are_enforced(&admin, &agent, Identity::Dedicated).await;
    let resource = inplaced_resource("ContainerRestartRollout", "containerrestartrollouts");
    let as_admin: Api<DynamicObject> = Api::namespaced_with(admin.clone(), NS, &resource);
    let as_agent: Api<DynamicObject> = Api::namespaced_with(agent.clone(), NS, &resource);
    let since = "2026-12-06T00:00:00Z";
    let count = 1000;
    let name = format!("web-{count}");
    let rollout: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "inplaced.io/v1alpha1",
        "kind": "ContainerRestartRollout",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "maxUnavailable": 100},
    }))
    .unwrap();
    let mut stored = as_admin
        .create(&PostParams::default(), &rollout)
        .await
        .unwrap();
    stored.data["status"] = json!({"phase": "Progressing", "nodes": parts(count, since)});
    let stored = as_admin
        .replace_status(&name, &PostParams::default(), &stored)
        .await
        .unwrap();
    let size = serde_json::to_vec(&stored).unwrap().len();

    // Node 0 takes the leader Lease (held by node-1 since until_the_policies_are_enforced).
    let leases: Api<Lease> = Api::namespaced(agent.clone(), NS);
    let mut lease = leases.get(LEADER_LEASE).await.unwrap();
    lease.spec.as_mut().unwrap().holder_identity = Some(OWN.into());
    leases
        .replace(LEADER_LEASE, &PostParams::default(), &lease)
        .await
        .expect("node-0 takes the leader Lease over");

    // Node 0 claims a third pod and releases a claim of node 1 (whose agent is gone). The
    // policy reads the Lease from an informer: a write refused before it has the new holder
    // is tried again (a refused write writes nothing).
    let mut write = stored.clone();
    let nodes = &mut write.data["status"]["nodes"];
    nodes["node-0"]["claims"]
        .as_array_mut()
        .unwrap()
        .push(json!({"pod": "web-0-2", "podUID": "uid-0-2", "since": since}));
    nodes["node-1"]["claims"].as_array_mut().unwrap().remove(0);
    let started = std::time::Instant::now();
    let admitted = wait_until("the leader's write admitted", WAIT, || {
        let (as_agent, name, write) = (as_agent.clone(), name.clone(), write.clone());
        async move {
            match as_agent
                .replace_status(&name, &PostParams::default(), &write)
                .await
            {
                Ok(admitted) => Ok(Some(admitted)),
                Err(kube::Error::Api(s)) if s.message.contains(NOT_THE_HOLDER) => Ok(None),
                Err(e) => Err(anyhow::anyhow!("{count} nodes ({size} bytes): {e}")),
            }
        }
    })
    .await
    .unwrap();
    eprintln!(
        "{count} nodes ({size} bytes): the leader's write admitted within {:.0} ms",
        started.elapsed().as_secs_f64() * 1000.0
    );

    // Node 1 holds the Lease: node 0's next write, of another node's count, is refused by the
    // rule (dry runs until the policy sees the new holder).
    let mut lease = Api::<Lease>::namespaced(admin.clone(), NS)
        .get(LEADER_LEASE)
        .await
        .unwrap();
    lease.spec.as_mut().unwrap().holder_identity = Some(OTHER.into());
    Api::<Lease>::namespaced(admin.clone(), NS)
        .replace(LEADER_LEASE, &PostParams::default(), &lease)
        .await
        .unwrap();
    let mut forbidden = admitted.clone();
    forbidden.data["status"]["nodes"]["node-2"]["done"] = json!(9);
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    wait_until(
        "the write of a node that no longer leads refused",
        WAIT,
        || {
            let (as_agent, name, forbidden, dry_run) = (
                as_agent.clone(),
                name.clone(),
                forbidden.clone(),
                dry_run.clone(),
            );
            async move {
                match as_agent.replace_status(&name, &dry_run, &forbidden).await {
                    Ok(_) => Ok(None),
                    Err(kube::Error::Api(s))
                        if s.code == 403 && s.message.contains(NOT_THE_HOLDER) =>
                    {
                        Ok(Some(()))
                    }
                    Err(e) => Err(anyhow::anyhow!(
                        "{count} nodes: refused for another reason: {e}"
                    )),
                }
            }
        },
    )
    .await
    .unwrap();
    let refused = as_agent
        .replace_status(&name, &PostParams::default(), &forbidden)
        .await
        .expect_err("a write of a node that does not hold the Lease is refused");
    assert!(
        refused.to_string().contains(&not_the_holder(OWN)),
        "{count} nodes: refused for another reason: {refused}"
    );
}

// Every refusal the docs promise (admission-policy.yaml, rbac-*.yaml, install.md, rollouts.md,
// restart-requests.md, upgrading.md), tried on a real kube-apiserver with the identity it
// targets, each beside the same identity's matching write for its own node, which must pass:
// a policy that refused everything would fail the test, and so would a refusal for another
// reason than the promised one (each refusal's message is checked).

/// The node whose agent writes; another node with objects of its own; a node with none.
const OWN: &str = "node-0";
const OTHER: &str = "node-1";
const THIRD: &str = "node-2";

#[derive(Clone, Copy, Debug)]
enum Identity {
    /// The kubelet's own: user system:node:<node>, group system:nodes (rbac-node-bound.yaml).
    NodeBound,
    /// user inplaced:node:<node>, group inplaced:agents (rbac-dedicated.yaml).
    Dedicated,
}

impl Identity {
    fn rbac(self) -> &'static str {
        match self {
            Identity::NodeBound => "rbac-node-bound.yaml",
            Identity::Dedicated => "rbac-dedicated.yaml",
        }
    }

    fn user(self, node: &str) -> String {
        match self {
            Identity::NodeBound => format!("system:node:{node}"),
            Identity::Dedicated => format!("inplaced:node:{node}"),
        }
    }

    fn group(self) -> &'static str {
        match self {
            Identity::NodeBound => "system:nodes",
            Identity::Dedicated => "inplaced:agents",
        }
    }
}

/// A control plane with the shipped manifests (the RBAC of `identity`), the test namespace,
/// Node objects for the three nodes, and the clients of the administrator and of OWN's agent.
struct Refusals {
    /// Stopped when the test ends.
    _cluster: ControlPlane,
    identity: Identity,
    user: String,
    admin: kube::Client,
    agent: kube::Client,
}

impl Refusals {
    async fn start(identity: Identity) -> Refusals {
        // Admission and authorization only: no controller is needed, the namespace's
        // ServiceAccount is made by hand.
        let mut config = ControlPlaneConfig::new(NEWEST);
        config.controllers.clear();
        let cluster = ControlPlane::start(config).await.unwrap();
        apply_shipped(&cluster, identity.rbac());
        kubectl(&cluster, &["create", "namespace", NS]);
        kubectl(&cluster, &["create", "serviceaccount", "default", "-n", NS]);
        let admin = cluster.admin_client().await.unwrap();
        let nodes: Api<Node> = Api::all(admin.clone());
        for node in [OWN, OTHER, THIRD] {
            // Room for a resize: pods/resize is refused beyond the node's allocatable.
            let room = json!({"cpu": "4", "memory": "8Gi", "pods": "110"});
            let object: Node = serde_json::from_value(json!({
                "metadata": {"name": node},
                "status": {"capacity": room, "allocatable": room},
            }))
            .unwrap();
            nodes.create(&PostParams::default(), &object).await.unwrap();
        }
        let user = identity.user(OWN);
        let agent = real_cluster::client_from(
            &cluster
                .kubeconfig_for(
                    &format!("{OWN}-{identity:?}.kubeconfig"),
                    &user,
                    Some(identity.group()),
                )
                .unwrap(),
        )
        .await
        .unwrap();
        let refusals = Refusals {
            _cluster: cluster,
            identity,
            user,
            admin,
            agent,
        };
        until_the_policies_are_enforced(&refusals.admin, &refusals.agent, identity).await;
        refusals
    }

    fn dynamic(&self, client: &kube::Client, resource: &ApiResource) -> Api<DynamicObject> {
        Api::namespaced_with(client.clone(), NS, resource)
    }

    /// RBAC's refusal of `verb` on `resource` to the agent (whatever the Node authorizer adds).
    fn rbac_denial(&self, verb: &str, resource: &str) -> String {
        format!(
            "User \"{}\" cannot {verb} resource \"{resource}\"",
            self.user
        )
    }
}

/// kube-apiserver enforces the policies of a snapshot it takes every second of what its
/// informers hold, so a policy just applied may not refuse yet. Waits until the shipped
/// policy applied last among those matching the identity refuses a dry-run write: the
/// snapshot that holds it holds the ones applied before it (admission-policy.yaml's order:
/// pods, requests, rollouts, then the dedicated identity's Lease). For the rollout policy the
/// administrator makes the namespace's leader Lease, held by OTHER, first: the probe's refusal
/// by the rule shows its param read too. The Lease stays, held by OTHER.
async fn until_the_policies_are_enforced(
    admin: &kube::Client,
    agent: &kube::Client,
    identity: Identity,
) {
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    Api::<Lease>::namespaced(admin.clone(), NS)
        .create(&PostParams::default(), &leader_lease(OTHER))
        .await
        .unwrap();
    let resource = inplaced_resource("ContainerRestartRollout", "containerrestartrollouts");
    let mut probe = Api::<DynamicObject>::namespaced_with(admin.clone(), NS, &resource)
        .create(
            &PostParams::default(),
            &object(json!({
                "apiVersion": "inplaced.io/v1alpha1",
                "kind": "ContainerRestartRollout",
                "metadata": {"name": "probe", "namespace": NS},
                "spec": {"selector": {"matchLabels": {"app": "probe"}}},
            })),
        )
        .await
        .unwrap();
    probe.data["status"] = json!({"phase": "Progressing", "nodes": {OWN: {"skipped": 1}}});
    let rollouts = Api::<DynamicObject>::namespaced_with(agent.clone(), NS, &resource);
    let enforced = |answer: Result<(), kube::Error>, why: &str| match answer {
        Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains(why) => Ok(Some(())),
        other => Err(anyhow::anyhow!("the answer: {other:?}")),
    };
    wait_until("the rollout policy refusing a dry run", WAIT, || {
        let (rollouts, probe, dry_run) = (rollouts.clone(), probe.clone(), dry_run.clone());
        async move {
            let answer = rollouts.replace_status("probe", &dry_run, &probe).await;
            enforced(answer.map(drop), &not_the_holder(OWN))
        }
    })
    .await
    .unwrap();
    if let Identity::Dedicated = identity {
        let leases: Api<Lease> = Api::namespaced(agent.clone(), NS);
        wait_until("the Lease policy refusing a dry run", WAIT, || {
            let (leases, dry_run) = (leases.clone(), dry_run.clone());
            async move {
                let answer = leases
                    .create(&dry_run, &lease(&format!("inplaced-agent-{OTHER}")))
                    .await;
                enforced(answer.map(drop), "inplaced-agent-lease")
            }
        })
        .await
        .unwrap();
    }
}

/// The namespace's rollout leader Lease.
const LEADER_LEASE: &str = "inplaced-rollout-leader";
/// The rollout policy's rule, refusing a node that does not hold the leader Lease.
const NOT_THE_HOLDER: &str = "may write a rollout's status only while it holds the Lease \
                              inplaced-rollout-leader of the namespace";

fn not_the_holder(node: &str) -> String {
    policy_denial(
        "inplaced-rollout-status-by-leader",
        &format!("node {node} {NOT_THE_HOLDER}"),
    )
}

/// The leader Lease held by `holder`.
fn leader_lease(holder: &str) -> Lease {
    serde_json::from_value(json!({
        "metadata": {"name": LEADER_LEASE},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15},
    }))
    .unwrap()
}

/// A shipped policy's refusal, as kube-apiserver words it.
fn policy_denial(policy: &str, message: &str) -> String {
    format!(
        "ValidatingAdmissionPolicy '{policy}' with binding '{policy}' denied request: {message}"
    )
}

/// The agent's write was refused with 403 and a message saying `why`.
#[track_caller]
fn refused<T: std::fmt::Debug>(what: &str, result: Result<T, kube::Error>, why: &str) {
    match result {
        Err(kube::Error::Api(status)) if status.code == 403 && status.message.contains(why) => {
            eprintln!("refused: {what}: {}", status.message);
        }
        other => panic!("{what}: expected a 403 saying {why:?}, got {other:?}"),
    }
}

/// The agent's write for its own node went through.
#[track_caller]
fn admitted<T>(what: &str, result: Result<T, kube::Error>) -> T {
    result.unwrap_or_else(|e| panic!("{what}: the agent's write for its own node was refused: {e}"))
}

fn object(value: Value) -> DynamicObject {
    serde_json::from_value(value).unwrap()
}

fn status_patch(status: Value) -> Patch<Value> {
    Patch::Merge(json!({ "status": status }))
}

/// A request of `kind` (apiVersion `api_version`) labelled `label`=`node`, about pod `pod`.
fn request(api_version: &str, kind: &str, name: &str, label: &str, node: &str) -> DynamicObject {
    let containers = if kind == "ContainerResizeRequest" {
        json!([{"name": "app", "resources": {"requests": {"cpu": "150m"}}}])
    } else {
        json!([{"name": "app"}])
    };
    object(json!({
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": name, "namespace": NS, "labels": {label: node}},
        "spec": {"podName": name, "containers": containers},
    }))
}

/// ContainerRecreateRequests (both versions the policy names), ContainerResizeRequests and
/// ContainerRestartRequests: only those labelled with the agent's node; status patch and delete
/// where RBAC grants them, create only of restart requests (rollouts make them), and no create of
/// the other kinds at all.
async fn only_its_own_nodes_requests(s: &Refusals) {
    let pp = PatchParams::default();
    let denial = |label: &str| {
        policy_denial(
            "inplaced-own-node-requests",
            &format!("node {OWN} may only modify requests labelled {label}={OWN}"),
        )
    };
    const INPLACED: &str = "inplaced.io/node-name";
    const KRUISE: &str = "crr.apps.kruise.io/node-name";
    let kinds = [
        (
            "apps.kruise.io/v1alpha1",
            "ContainerRecreateRequest",
            "containerrecreaterequests",
            KRUISE,
            "Recreating",
        ),
        (
            "apps.kruise.io/v1beta1",
            "ContainerRecreateRequest",
            "containerrecreaterequests",
            KRUISE,
            "Recreating",
        ),
        (
            "inplaced.io/v1alpha1",
            "ContainerResizeRequest",
            "containerresizerequests",
            INPLACED,
            "InProgress",
        ),
        (
            "inplaced.io/v1alpha1",
            "ContainerRestartRequest",
            "containerrestartrequests",
            INPLACED,
            "Restarting",
        ),
    ];
    for (api_version, kind, plural, label, phase) in kinds {
        let (group, version) = api_version.split_once('/').unwrap();
        let resource =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
        let as_admin = s.dynamic(&s.admin, &resource);
        let as_agent = s.dynamic(&s.agent, &resource);
        let mine = format!("mine-{}", version);
        let theirs = format!("theirs-{}", version);
        for (name, node) in [(&mine, OWN), (&theirs, OTHER)] {
            as_admin
                .create(
                    &PostParams::default(),
                    &request(api_version, kind, name, label, node),
                )
                .await
                .unwrap();
        }
        let what = |write: &str| format!("{:?} {write} {kind} {api_version}", s.identity);

        // The status: the agent's report of its own node's requests only.
        let status = status_patch(json!({"phase": phase}));
        refused(
            &what("status of another node's"),
            as_agent.patch_status(&theirs, &pp, &status).await,
            &denial(label),
        );
        admitted(
            &what("status of its own node's"),
            as_agent.patch_status(&mine, &pp, &status).await,
        );

        if kind == "ContainerRecreateRequest" {
            // CRRs are kruise's to make and delete: only list/watch and a status patch.
            refused(
                &what("create of its own node's"),
                as_agent
                    .create(
                        &PostParams::default(),
                        &request(api_version, kind, "new", label, OWN),
                    )
                    .await,
                &s.rbac_denial("create", plural),
            );
            refused(
                &what("delete of its own node's"),
                as_agent.delete(&mine, &DeleteParams::default()).await,
                &s.rbac_denial("delete", plural),
            );
            continue;
        }

        // Deletion after the TTL: its own node's only.
        refused(
            &what("delete of another node's"),
            as_agent.delete(&theirs, &DeleteParams::default()).await,
            &denial(label),
        );
        admitted(
            &what("delete of its own node's"),
            as_agent.delete(&mine, &DeleteParams::default()).await,
        );

        if kind == "ContainerResizeRequest" {
            refused(
                &what("create of its own node's"),
                as_agent
                    .create(
                        &PostParams::default(),
                        &request(api_version, kind, "new", label, OWN),
                    )
                    .await,
                &s.rbac_denial("create", plural),
            );
            continue;
        }

        // A rollout's restart requests: made by the agent, for its own node's pods only, and
        // kruise's node label does not stand for inplaced's.
        refused(
            &what("create of another node's"),
            as_agent
                .create(
                    &PostParams::default(),
                    &request(api_version, kind, "new-theirs", label, OTHER),
                )
                .await,
            &denial(label),
        );
        refused(
            &what("create labelled with kruise's node label only"),
            as_agent
                .create(
                    &PostParams::default(),
                    &request(api_version, kind, "new-kruise", KRUISE, OWN),
                )
                .await,
            &denial(label),
        );
        admitted(
            &what("create of its own node's"),
            as_agent
                .create(
                    &PostParams::default(),
                    &request(api_version, kind, "new-mine", label, OWN),
                )
                .await,
        );
    }
}

fn upgrade_check(name: &str, labelled: &str) -> DynamicObject {
    object(json!({
        "apiVersion": "inplaced.io/v1alpha1",
        "kind": "NodeUpgradeCheck",
        "metadata": {"name": name, "labels": {"inplaced.io/node-name": labelled}},
        "status": {"kubeletVersion": "v1.36.3", "targets": []},
    }))
}

/// NodeUpgradeChecks: only the one named after the agent's node and labelled with it.
async fn only_its_own_nodes_upgrade_check(s: &Refusals) {
    let resource = inplaced_resource("NodeUpgradeCheck", "nodeupgradechecks");
    let as_admin: Api<DynamicObject> = Api::all_with(s.admin.clone(), &resource);
    let as_agent: Api<DynamicObject> = Api::all_with(s.agent.clone(), &resource);
    let pp = PostParams::default();
    let label_denial = policy_denial(
        "inplaced-own-node-requests",
        &format!("node {OWN} may only modify requests labelled inplaced.io/node-name={OWN}"),
    );
    let name_denial = policy_denial(
        "inplaced-own-node-requests",
        &format!("node {OWN} may only write the NodeUpgradeCheck named {OWN}"),
    );
    let what = |write: &str| format!("{:?} {write}", s.identity);

    refused(
        &what("creates another node's NodeUpgradeCheck"),
        as_agent.create(&pp, &upgrade_check(OTHER, OTHER)).await,
        &label_denial,
    );
    refused(
        &what("creates one named after another node, labelled with its own"),
        as_agent.create(&pp, &upgrade_check(OTHER, OWN)).await,
        &name_denial,
    );
    refused(
        &what("creates one of another name, labelled with its own node"),
        as_agent
            .create(&pp, &upgrade_check(&format!("{OWN}-copy"), OWN))
            .await,
        &name_denial,
    );
    refused(
        &what("creates one named after its node, labelled with another"),
        as_agent.create(&pp, &upgrade_check(OWN, OTHER)).await,
        &label_denial,
    );
    let mine = admitted(
        &what("creates its own node's NodeUpgradeCheck"),
        as_agent.create(&pp, &upgrade_check(OWN, OWN)).await,
    );
    let mut changed = mine.clone();
    changed.data["status"]["kubeletVersion"] = json!("v1.37.0");
    let mine = admitted(
        &what("updates its own node's NodeUpgradeCheck"),
        as_agent.replace(OWN, &pp, &changed).await,
    );
    let mut given_away = mine.clone();
    given_away
        .labels_mut()
        .insert("inplaced.io/node-name".into(), OTHER.into());
    refused(
        &what("relabels its own NodeUpgradeCheck with another node"),
        as_agent.replace(OWN, &pp, &given_away).await,
        &label_denial,
    );
    let theirs = as_admin
        .create(&pp, &upgrade_check(OTHER, OTHER))
        .await
        .unwrap();
    let mut taken_over = theirs.clone();
    taken_over
        .labels_mut()
        .insert("inplaced.io/node-name".into(), OWN.into());
    refused(
        &what("relabels another node's NodeUpgradeCheck with its own node"),
        as_agent.replace(OTHER, &pp, &taken_over).await,
        &label_denial,
    );
    let mut changed = theirs.clone();
    changed.data["status"]["kubeletVersion"] = json!("v1.20.0");
    refused(
        &what("updates another node's NodeUpgradeCheck"),
        as_agent.replace(OTHER, &pp, &changed).await,
        &label_denial,
    );
}

/// ContainerRestartRollouts: the status only while the agent's node holds the namespace's
/// leader Lease, and then every node's part of it; with the Lease gone no status write at all
/// (kube-apiserver's param-not-found, the administrator's included), while the rollout itself
/// stays the user's; the agent may not write the rollout itself. Starts with the Lease held by
/// OTHER (`until_the_policies_are_enforced`) and ends without it.
async fn only_the_leader_writes_a_rollouts_status(s: &Refusals) {
    let resource = inplaced_resource("ContainerRestartRollout", "containerrestartrollouts");
    let as_admin = s.dynamic(&s.admin, &resource);
    let as_agent = s.dynamic(&s.agent, &resource);
    let admin_leases: Api<Lease> = Api::namespaced(s.admin.clone(), NS);
    let pp = PostParams::default();
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let since = "2026-12-06T00:00:00Z";
    let what = |write: &str| format!("{:?} {write}", s.identity);
    let rollout = |name: &str| {
        object(json!({
            "apiVersion": "inplaced.io/v1alpha1",
            "kind": "ContainerRestartRollout",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "maxUnavailable": 2},
        }))
    };
    // `parts(2, …)` are the parts of node-0 (OWN) and node-1 (OTHER).
    let mut stored = as_admin.create(&pp, &rollout("web")).await.unwrap();
    stored.data["status"] = json!({"phase": "Progressing", "nodes": parts(2, since)});
    let stored = as_admin.replace_status("web", &pp, &stored).await.unwrap();

    // Each: what the write does, its change to `status.nodes`.
    type Change = fn(&mut Value);
    let writes: [(&str, Change); 5] = [
        ("claims a pod and releases another node's claim", |n| {
            n[OWN]["claims"].as_array_mut().unwrap().push(
                json!({"pod": "web-0-2", "podUID": "uid-0-2", "since": "2026-12-06T00:00:00Z"}),
            );
            n[OWN]["skipped"] = json!(4);
            n[OTHER]["claims"].as_array_mut().unwrap().remove(0);
        }),
        ("changes another node's count", |n| {
            n[OTHER]["skipped"] = json!(9)
        }),
        ("adds a claim to another node's part", |n| {
            n[OTHER]["claims"].as_array_mut().unwrap().push(
                json!({"pod": "web-1-9", "podUID": "uid-1-9", "since": "2026-12-06T00:00:00Z"}),
            )
        }),
        ("drops another node's part", |n| {
            n.as_object_mut().unwrap().remove(OTHER);
        }),
        ("adds a part for another node", |n| {
            n[THIRD] = json!({"skipped": 1})
        }),
    ];
    let changed = |base: &DynamicObject, change: Change| {
        let mut attempt = base.clone();
        change(&mut attempt.data["status"]["nodes"]);
        attempt
    };

    // OTHER leads: every status write refused by the rule.
    for (write, change) in writes {
        refused(
            &what(&format!("{write}, OTHER leading")),
            as_agent
                .replace_status("web", &pp, &changed(&stored, change))
                .await,
            &not_the_holder(OWN),
        );
    }

    // OWN leads (the administrator hands it the Lease; the dedicated identity's taking it
    // itself is tried with the Leases): every write admitted, once the policy's informer has
    // the new holder.
    let mut lease = admin_leases.get(LEADER_LEASE).await.unwrap();
    lease.spec.as_mut().unwrap().holder_identity = Some(OWN.into());
    admin_leases
        .replace(LEADER_LEASE, &pp, &lease)
        .await
        .unwrap();
    let first = changed(&stored, writes[0].1);
    wait_until("the policy seeing OWN lead", WAIT, || {
        let (as_agent, first, dry_run) = (as_agent.clone(), first.clone(), dry_run.clone());
        async move {
            match as_agent.replace_status("web", &dry_run, &first).await {
                Ok(_) => Ok(Some(())),
                Err(e) => Err(anyhow::anyhow!("{e}")),
            }
        }
    })
    .await
    .unwrap();
    let mut current = stored.clone();
    for (write, change) in writes {
        current = admitted(
            &what(&format!("{write}, leading")),
            as_agent
                .replace_status("web", &pp, &changed(&current, change))
                .await,
        );
    }

    // No Lease: the binding finds no param and refuses every status write it matches, with
    // kube-apiserver's configuration error (422 Invalid), whoever writes.
    admin_leases
        .delete(LEADER_LEASE, &DeleteParams::default())
        .await
        .unwrap();
    let no_lease = format!(
        "containerrestartrollouts.inplaced.io \"web\" is forbidden: {}",
        policy_denial(
            "inplaced-rollout-status-by-leader",
            "failed to configure binding: no params found for policy binding with `Deny` \
             parameterNotFoundAction"
        )
    );
    let attempt = changed(&current, writes[1].1);
    wait_until("the policy seeing no leader Lease", WAIT, || {
        let (as_agent, attempt, dry_run) = (as_agent.clone(), attempt.clone(), dry_run.clone());
        async move {
            match as_agent.replace_status("web", &dry_run, &attempt).await {
                Err(kube::Error::Api(s)) if s.message.contains("no params found") => Ok(Some(())),
                other => Err(anyhow::anyhow!("{other:?}")),
            }
        }
    })
    .await
    .unwrap();
    for (who, api) in [("the agent", &as_agent), ("the administrator", &as_admin)] {
        match api.replace_status("web", &pp, &attempt).await {
            Err(kube::Error::Api(status)) => {
                assert_eq!(
                    (status.code, status.reason.as_str(), status.message.as_str()),
                    (422, "Invalid", no_lease.as_str()),
                    "{:?}: {who}'s status write without a leader Lease",
                    s.identity
                );
                eprintln!(
                    "refused: {who}'s status write without a Lease: {}",
                    status.message
                );
            }
            other => panic!("{who}'s status write without a leader Lease: {other:?}"),
        }
    }
    // The rollout itself is not the binding's: the administrator makes, pauses and deletes one.
    as_admin
        .create(&pp, &rollout("web-new"))
        .await
        .expect("a rollout made without a leader Lease");
    as_admin
        .patch(
            "web-new",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"paused": true}})),
        )
        .await
        .expect("a rollout paused without a leader Lease");
    as_admin
        .delete("web-new", &DeleteParams::default())
        .await
        .expect("a rollout deleted without a leader Lease");

    // The rollout itself is the user's: RBAC already refuses the agent, before the policy's
    // first rule (status writes only) would.
    refused(
        &what("creates a rollout"),
        as_agent.create(&pp, &rollout("mine")).await,
        &s.rbac_denial("create", "containerrestartrollouts"),
    );
    refused(
        &what("pauses a rollout"),
        as_agent
            .patch(
                "web",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"paused": true}})),
            )
            .await,
        &s.rbac_denial("patch", "containerrestartrollouts"),
    );
    refused(
        &what("deletes a rollout"),
        as_agent.delete("web", &DeleteParams::default()).await,
        &s.rbac_denial("delete", "containerrestartrollouts"),
    );
}

/// A pod of the test's `app` container on `node`, with cpu and memory requests and limits (a
/// Burstable pod, which a cpu resize keeps Burstable).
fn resizable_pod(name: &str, node: &str) -> Pod {
    let mut pod = pod(name, node);
    pod.spec.as_mut().unwrap().containers[0].resources = Some(
        serde_json::from_value(json!({
            "requests": {"cpu": "100m", "memory": "64Mi"},
            "limits": {"cpu": "200m", "memory": "64Mi"},
        }))
        .unwrap(),
    );
    pod
}

/// The pods `mine` on OWN and `theirs` on OTHER, made by the administrator.
async fn pods_of_two_nodes(s: &Refusals) {
    let pods: Api<Pod> = Api::namespaced(s.admin.clone(), NS);
    for (name, node) in [("mine", OWN), ("theirs", OTHER)] {
        pods.create(&PostParams::default(), &resizable_pod(name, node))
            .await
            .unwrap();
    }
}

/// The agent's writes to pods: the runtime-containers-meta annotation through pods/status, and
/// for the `kubelet` resize actuator a pods/resize patch or a pod patch.
fn containers_meta() -> Patch<Value> {
    Patch::Merge(
        json!({"metadata": {"annotations": {"apps.kruise.io/runtime-containers-meta": "{\"containers\":[]}"}}}),
    )
}

fn resize_to(cpu: &str) -> Patch<Value> {
    Patch::Strategic(
        json!({"spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": cpu}}}]}}),
    )
}

fn annotated(value: &str) -> Patch<Value> {
    Patch::Merge(json!({"metadata": {"annotations": {"inplaced.io/test": value}}}))
}

async fn secrets_are_refused(s: &Refusals, why: &str) {
    let as_admin: Api<Secret> = Api::namespaced(s.admin.clone(), NS);
    let secret: Secret = serde_json::from_value(
        json!({"metadata": {"name": "credentials"}, "stringData": {"k": "v"}}),
    )
    .unwrap();
    as_admin
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let as_agent: Api<Secret> = Api::namespaced(s.agent.clone(), NS);
    refused(
        &format!("{:?} reads a Secret", s.identity),
        as_agent.get("credentials").await,
        why,
    );
}

fn lease(name: &str) -> Lease {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"holderIdentity": OWN, "leaseDurationSeconds": 40},
    }))
    .unwrap()
}

/// The dedicated identity (rbac-dedicated.yaml): the policies on pods, requests, rollouts and
/// its Lease, and what its role leaves out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the real Kubernetes binaries: run tests/run-all.sh"]
async fn the_dedicated_identity_is_refused_every_write_the_docs_forbid_and_admitted_its_own_nodes()
{
    let s = Refusals::start(Identity::Dedicated).await;
    let pp = PatchParams::default();
    pods_of_two_nodes(&s).await;
    let pods: Api<Pod> = Api::namespaced(s.agent.clone(), NS);
    let pod_denial = policy_denial(
        "inplaced-own-node-pods",
        &format!("node {OWN} may only modify pods bound to it"),
    );
    for (write, theirs, mine) in [
        (
            "patches pod status (containers meta)",
            pods.patch_status("theirs", &pp, &containers_meta())
                .await
                .map(drop),
            pods.patch_status("mine", &pp, &containers_meta())
                .await
                .map(drop),
        ),
        (
            "resizes a pod (pods/resize)",
            pods.patch_subresource("resize", "theirs", &pp, &resize_to("150m"))
                .await
                .map(drop),
            pods.patch_subresource("resize", "mine", &pp, &resize_to("150m"))
                .await
                .map(drop),
        ),
        (
            "patches a pod",
            pods.patch("theirs", &pp, &annotated("x")).await.map(drop),
            pods.patch("mine", &pp, &annotated("x")).await.map(drop),
        ),
    ] {
        refused(
            &format!("Dedicated {write} of another node"),
            theirs,
            &pod_denial,
        );
        admitted(&format!("Dedicated {write} of its own node"), mine);
    }
    // A pod bound to no node is not its node's either.
    let mut unscheduled = resizable_pod("unscheduled", OWN);
    unscheduled.spec.as_mut().unwrap().node_name = None;
    Api::<Pod>::namespaced(s.admin.clone(), NS)
        .create(&PostParams::default(), &unscheduled)
        .await
        .unwrap();
    refused(
        "Dedicated patches a pod bound to no node",
        pods.patch("unscheduled", &pp, &annotated("x")).await,
        &pod_denial,
    );
    let resized = pods.get("mine").await;
    // get is not granted (list/watch only): the administrator reads the resize back.
    refused(
        "Dedicated gets a pod",
        resized,
        &s.rbac_denial("get", "pods"),
    );
    let mine = Api::<Pod>::namespaced(s.admin.clone(), NS)
        .get("mine")
        .await
        .unwrap();
    assert_eq!(
        mine.spec.unwrap().containers[0]
            .resources
            .as_ref()
            .unwrap()
            .requests
            .as_ref()
            .unwrap()["cpu"]
            .0,
        "150m",
        "the admitted resize is stored"
    );
    refused(
        "Dedicated creates a pod",
        pods.create(&PostParams::default(), &resizable_pod("new", OWN))
            .await,
        &s.rbac_denial("create", "pods"),
    );
    refused(
        "Dedicated deletes a pod of its own node",
        pods.delete("mine", &DeleteParams::default()).await,
        &s.rbac_denial("delete", "pods"),
    );

    only_its_own_nodes_requests(&s).await;
    only_its_own_nodes_upgrade_check(&s).await;
    only_the_leader_writes_a_rollouts_status(&s).await;

    // Its Lease, in the rollout's namespace: inplaced-agent-<node> and no other but the
    // namespace's leader Lease in its own name.
    let leases: Api<Lease> = Api::namespaced(s.agent.clone(), NS);
    let lease_denial = policy_denial(
        "inplaced-agent-lease",
        &format!(
            "node {OWN} may only write the Lease inplaced-agent-{OWN}, and the Lease \
             inplaced-rollout-leader only in its own name"
        ),
    );
    let own_lease = format!("inplaced-agent-{OWN}");
    let other_lease = format!("inplaced-agent-{OTHER}");
    refused(
        "Dedicated creates another node's agent Lease",
        leases
            .create(&PostParams::default(), &lease(&other_lease))
            .await,
        &lease_denial,
    );
    refused(
        "Dedicated creates its kubelet's node Lease",
        Api::<Lease>::namespaced(s.agent.clone(), "kube-node-lease")
            .create(&PostParams::default(), &lease(OWN))
            .await,
        &lease_denial,
    );
    let created = admitted(
        "Dedicated creates its own agent Lease",
        leases
            .create(&PostParams::default(), &lease(&own_lease))
            .await,
    );
    admitted(
        "Dedicated renews its own agent Lease",
        leases
            .replace(&own_lease, &PostParams::default(), &created)
            .await,
    );
    let theirs = Api::<Lease>::namespaced(s.admin.clone(), NS)
        .create(&PostParams::default(), &lease(&other_lease))
        .await
        .unwrap();
    refused(
        "Dedicated renews another node's agent Lease",
        leases
            .replace(&other_lease, &PostParams::default(), &theirs)
            .await,
        &lease_denial,
    );
    refused(
        "Dedicated deletes its own agent Lease",
        leases.delete(&own_lease, &DeleteParams::default()).await,
        &s.rbac_denial("delete", "leases"),
    );

    // The leader Lease (gone since the rollout checks): taken only in its own name, renewed,
    // never handed to another node; another node's taken over (the agents judge whether it
    // had expired), not renewed in that node's name.
    refused(
        "Dedicated creates the leader Lease in another node's name",
        leases
            .create(&PostParams::default(), &leader_lease(OTHER))
            .await,
        &lease_denial,
    );
    let taken = admitted(
        "Dedicated takes the leader Lease",
        leases
            .create(&PostParams::default(), &leader_lease(OWN))
            .await,
    );
    let renewed = admitted(
        "Dedicated renews the leader Lease",
        leases
            .replace(LEADER_LEASE, &PostParams::default(), &taken)
            .await,
    );
    let mut handed = renewed.clone();
    handed.spec.as_mut().unwrap().holder_identity = Some(OTHER.into());
    refused(
        "Dedicated hands the leader Lease to another node",
        leases
            .replace(LEADER_LEASE, &PostParams::default(), &handed)
            .await,
        &lease_denial,
    );
    let theirs = admitted(
        "the administrator gives the leader Lease to another node",
        Api::<Lease>::namespaced(s.admin.clone(), NS)
            .replace(LEADER_LEASE, &PostParams::default(), &handed)
            .await,
    );
    refused(
        "Dedicated renews another node's leader Lease",
        leases
            .replace(LEADER_LEASE, &PostParams::default(), &theirs)
            .await,
        &lease_denial,
    );
    let mut taken_over = theirs.clone();
    taken_over.spec.as_mut().unwrap().holder_identity = Some(OWN.into());
    admitted(
        "Dedicated takes another node's leader Lease over",
        leases
            .replace(LEADER_LEASE, &PostParams::default(), &taken_over)
            .await,
    );
    refused(
        "Dedicated deletes the leader Lease it holds",
        leases.delete(LEADER_LEASE, &DeleteParams::default()).await,
        &s.rbac_denial("delete", "leases"),
    );

    secrets_are_refused(&s, &s.rbac_denial("get", "secrets")).await;
}

/// The kubelet's own identity with rbac-node-bound.yaml: the policies on requests and rollouts;
/// on pods and Leases NodeRestriction refuses first, as the docs say (and the policies must not
/// refuse the kubelet's own writes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the real Kubernetes binaries: run tests/run-all.sh"]
async fn the_node_bound_identity_is_refused_every_write_the_docs_forbid_and_admitted_its_own_nodes()
{
    let s = Refusals::start(Identity::NodeBound).await;
    let pp = PatchParams::default();
    pods_of_two_nodes(&s).await;
    let pods: Api<Pod> = Api::namespaced(s.agent.clone(), NS);

    // The Node authorizer lets a node list its own pods only: no rollout census.
    refused(
        "NodeBound lists the namespace's pods",
        pods.list(&ListParams::default()).await,
        "can only list/watch pods with spec.nodeName field selector",
    );
    let own = admitted(
        "NodeBound lists its own node's pods",
        pods.list(&ListParams::default().fields(&format!("spec.nodeName={OWN}")))
            .await,
    );
    assert_eq!(
        own.items
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect::<Vec<_>>(),
        ["mine"]
    );

    // Pod status (containers meta): its own node's pods only (NodeRestriction says so before
    // the policy does).
    refused(
        "NodeBound patches pod status (containers meta) of another node",
        pods.patch_status("theirs", &pp, &containers_meta()).await,
        &format!(
            "node \"{OWN}\" can only update pod status for pods with spec.nodeName set to itself"
        ),
    );
    admitted(
        "NodeBound patches pod status (containers meta) of its own node",
        pods.patch_status("mine", &pp, &containers_meta()).await,
    );
    // The `kubelet` resize actuator needs the dedicated identity: NodeRestriction lets a node
    // change only its pods' status, even on its own node.
    refused(
        "NodeBound resizes a pod of its own node (pods/resize)",
        pods.patch_subresource("resize", "mine", &pp, &resize_to("150m"))
            .await,
        "unexpected pod subresource \"resize\", only 'status' and 'eviction' are allowed",
    );
    refused(
        "NodeBound patches a pod of its own node",
        pods.patch("mine", &pp, &annotated("x")).await,
        &format!("node \"{OWN}\" can only create and delete mirror pods"),
    );
    // The pod policy checks updates only: the kubelet's mirror pods and deletions are
    // NodeRestriction's, and go through for its own node.
    let node_uid = Api::<Node>::all(s.admin.clone())
        .get(OWN)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    let mut mirror = pod("static-web", OWN);
    mirror.metadata.annotations = Some(
        [(
            "kubernetes.io/config.mirror".to_string(),
            "hash".to_string(),
        )]
        .into(),
    );
    mirror.metadata.owner_references = Some(vec![
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Node", "name": OWN,
                                      "uid": node_uid, "controller": true}))
        .unwrap(),
    ]);
    admitted(
        "NodeBound creates its node's mirror pod",
        pods.create(&PostParams::default(), &mirror).await,
    );
    refused(
        "NodeBound deletes a pod of another node",
        pods.delete("theirs", &DeleteParams::default()).await,
        &format!("node \"{OWN}\" can only delete pods with spec.nodeName set to itself"),
    );
    admitted(
        "NodeBound deletes a pod of its own node",
        pods.delete("mine", &DeleteParams::default()).await,
    );

    only_its_own_nodes_requests(&s).await;
    only_its_own_nodes_upgrade_check(&s).await;
    only_the_leader_writes_a_rollouts_status(&s).await;

    // No Lease but its kubelet's (NodeRestriction), which the Lease policy leaves alone: so
    // no leader Lease either, and no rollout led.
    for name in [format!("inplaced-agent-{OWN}"), LEADER_LEASE.to_string()] {
        refused(
            &format!("NodeBound creates the Lease {name}"),
            Api::<Lease>::namespaced(s.agent.clone(), NS)
                .create(&PostParams::default(), &lease(&name))
                .await,
            "can only access leases in the \"kube-node-lease\" system namespace",
        );
    }
    let node_leases: Api<Lease> = Api::namespaced(s.agent.clone(), "kube-node-lease");
    refused(
        "NodeBound creates another node's node Lease",
        node_leases
            .create(&PostParams::default(), &lease(OTHER))
            .await,
        "can only access node lease with the same name as the requesting node",
    );
    let heartbeat = admitted(
        "NodeBound creates its own node Lease (the kubelet's heartbeat)",
        node_leases
            .create(&PostParams::default(), &lease(OWN))
            .await,
    );
    admitted(
        "NodeBound renews its own node Lease",
        node_leases
            .replace(OWN, &PostParams::default(), &heartbeat)
            .await,
    );

    secrets_are_refused(
        &s,
        &format!("no relationship found between node '{OWN}' and this object"),
    )
    .await;
}
