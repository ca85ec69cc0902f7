//! The shipped admission policies on a real kube-apiserver: type-checked, within its CEL cost
//! limits, and refusing what the docs say they refuse, to the identity they target.

mod support;

use kube::api::{Api, DynamicObject, PostParams};
use real_cluster::{ControlPlane, ControlPlaneConfig, NEWEST, wait_until};
use serde_json::{Value, json};
use support::real::*;

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
    // ContainerRecreateRequest has no spec.nodeName.
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
    kubectl(
        &cluster,
        &[
            "apply",
            "--server-side",
            &format!("-f={}", control.display()),
        ],
    );
    let mut names = names;
    names.push("inplaced-test-checker-runs".into());
    let statuses = wait_until("every policy's type-checking status", WAIT, || {
        let names = names.clone();
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
    .unwrap();
    let (control, statuses): (Vec<Value>, Vec<Value>) = statuses
        .into_iter()
        .partition(|p| p["metadata"]["name"] == "inplaced-test-checker-runs");
    assert!(
        control[0]["status"]["typeChecking"]["expressionWarnings"]
            .as_array()
            .is_some_and(|w| !w.is_empty()),
        "the type checker found nothing wrong in a policy that reads a field CRRs do not have: \
         it did not check: {:#}",
        control[0]["status"]
    );
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
            json!({"matched": 10, "done": 3, "pending": 5, "claims": claims, "failures": []}),
        );
    }
    Value::Object(nodes)
}

/// The rollout policy on a real apiserver, with a rollout of 100 and of 1000 nodes: an agent's
/// heaviest ordinary write (its own part changed and a claim of another node released) is
/// admitted within kube-apiserver's CEL cost limits, and a forbidden one is refused by the rule
/// itself, not by a cost limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the real Kubernetes binaries: run tests/run-all.sh"]
async fn the_rollout_policy_admits_an_agents_writes_within_the_cel_cost_limits_at_1000_nodes() {
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
    let resource = inplaced_resource("ContainerRestartRollout", "containerrestartrollouts");
    let as_admin: Api<DynamicObject> = Api::namespaced_with(admin, NS, &resource);
    let as_agent: Api<DynamicObject> = Api::namespaced_with(agent, NS, &resource);
    let since = "2026-12-06T00:00:00Z";
    for count in [100, 1000] {
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

        // Node 0 claims a third pod and releases a claim of node 1 (whose agent is gone).
        let mut write = stored.clone();
        let nodes = &mut write.data["status"]["nodes"];
        nodes["node-0"]["claims"]
            .as_array_mut()
            .unwrap()
            .push(json!({"pod": "web-0-2", "podUID": "uid-0-2", "since": since}));
        nodes["node-1"]["claims"].as_array_mut().unwrap().remove(0);
        let started = std::time::Instant::now();
        let admitted = as_agent
            .replace_status(&name, &PostParams::default(), &write)
            .await
            .unwrap_or_else(|e| panic!("{count} nodes ({size} bytes): the agent's write: {e}"));
        eprintln!(
            "{count} nodes ({size} bytes): an agent's write admitted in {:.0} ms",
            started.elapsed().as_secs_f64() * 1000.0
        );

        // Another node's count changed: refused by the rule.
        let mut forbidden = admitted.clone();
        forbidden.data["status"]["nodes"]["node-2"]["done"] = json!(9);
        let refused = as_agent
            .replace_status(&name, &PostParams::default(), &forbidden)
            .await
            .expect_err("changing another node's part is refused");
        let message = refused.to_string();
        assert!(
            message.contains("may only remove claims from the part of another node"),
            "{count} nodes: refused for another reason: {message}"
        );
    }
}
