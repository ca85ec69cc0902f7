//! The kruise-manager stand-in's rules, against the API double only (pods are seeded with a
//! status; no runtime needed).

use std::time::{Duration, Instant};

use apiserver_double::{ApiServer, ServerConfig};
use node_sandbox::manager::{self, ManagerConfig, ManagerStandIn};
use node_sandbox::util::{kube_client, now_rfc3339, unique_name};
use serde_json::{Value, json};

const NS: &str = "manager-test";
const CRR: &str = "containerrecreaterequests.apps.kruise.io";

struct Env {
    server: ApiServer,
    client: kube::Client,
    _manager: ManagerStandIn,
}

async fn start(response_timeout: Duration) -> Env {
    let server = ApiServer::start(ServerConfig::default()).await.unwrap();
    let kubeconfig = server.kubeconfig(None);
    let mut config = ManagerConfig::new(&kubeconfig);
    config.response_timeout = response_timeout;
    config.resync = Duration::from_millis(100);
    let manager = ManagerStandIn::start(config).await.unwrap();
    let client = kube_client(&kubeconfig).await.unwrap();
    Env {
        server,
        client,
        _manager: manager,
    }
}

fn pod(name: &str, started_at: &str) -> Value {
    json!({
        "metadata": {"name": name, "namespace": NS},
        "spec": {"nodeName": "node-a", "containers": [
            {"name": "main", "image": "x", "ports": [{"containerPort": 80, "protocol": "TCP"}],
             "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c", "sleep 1"]}}}},
            {"name": "side", "image": "y"}
        ]},
        "status": {"phase": "Running", "containerStatuses": [
            {"name": "main", "containerID": "containerd://aaa", "restartCount": 2, "ready": true,
             "state": {"running": {"startedAt": started_at}}},
            {"name": "side", "containerID": "containerd://bbb", "restartCount": 0, "ready": true,
             "state": {"running": {"startedAt": "2020-01-01T00:00:00Z"}}}
        ]}
    })
}

fn crr(name: &str, pod: &str, extra: Value) -> Value {
    let mut spec = json!({"podName": pod, "containers": [{"name": "main"}, {"name": "side"}]});
    if let Value::Object(m) = extra {
        for (k, v) in m {
            spec[k] = v;
        }
    }
    json!({"metadata": {"name": name, "namespace": NS}, "spec": spec})
}

impl Env {
    fn crr(&self, name: &str) -> Option<Value> {
        self.server.store().get(CRR, NS, name)
    }

    async fn wait_crr(&self, name: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(c) = self.crr(name)
                && pred(&c)
            {
                return c;
            }
            assert!(
                Instant::now() < deadline,
                "timed out: {:#?}",
                self.crr(name)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn set_phase(&self, name: &str, phase: &str) {
        self.server
            .store()
            .merge_patch(CRR, NS, name, json!({"status": {"phase": phase}}))
            .unwrap();
    }
}

#[tokio::test]
async fn webhook_fills_labels_status_context_and_prestop() {
    let env = start(Duration::from_secs(60)).await;
    let p = env
        .server
        .store()
        .create("pods", pod("p1", &now_rfc3339()))
        .unwrap();
    let created = manager::create_crr(&env.client, crr("c1", "p1", json!({})))
        .await
        .unwrap();
    let labels = &created["metadata"]["labels"];
    assert_eq!(labels[manager::LABEL_NODE_NAME], "node-a");
    assert_eq!(labels[manager::LABEL_POD_UID], p["metadata"]["uid"]);
    assert_eq!(labels[manager::LABEL_ACTIVE], "true");
    let main = &created["spec"]["containers"][0];
    assert_eq!(
        main["statusContext"],
        json!({"containerID": "containerd://aaa", "restartCount": 2})
    );
    assert_eq!(main["preStop"]["exec"]["command"][2], "sleep 1");
    assert_eq!(main["ports"][0]["containerPort"], 80);
    assert_eq!(
        created["spec"]["containers"][1]["statusContext"]["containerID"],
        "containerd://bbb"
    );
    assert_eq!(created["spec"]["strategy"]["failurePolicy"], "Fail");

    // The pod's grace period when the request names none (kruise's webhook copies it).
    let mut graceful = pod("p-grace", &now_rfc3339());
    graceful["spec"]["terminationGracePeriodSeconds"] = json!(7);
    env.server.store().create("pods", graceful).unwrap();
    let copied = manager::create_crr(&env.client, crr("c-grace", "p-grace", json!({})))
        .await
        .unwrap();
    assert_eq!(
        copied["spec"]["strategy"]["terminationGracePeriodSeconds"],
        7
    );
    let own = json!({"strategy": {"terminationGracePeriodSeconds": 3}});
    let kept = manager::create_crr(&env.client, crr("c-own", "p-grace", own))
        .await
        .unwrap();
    assert_eq!(kept["spec"]["strategy"]["terminationGracePeriodSeconds"], 3);

    // Rejections: unknown pod, unknown container.
    assert!(
        manager::create_crr(&env.client, crr("c2", "nope", json!({})))
            .await
            .is_err()
    );
    let mut bad = crr("c3", "p1", json!({}));
    bad["spec"]["containers"] = json!([{"name": "ghost"}]);
    let err = manager::create_crr(&env.client, bad)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("ghost"), "{err}");

    // A CRR put straight into the store gets the same mutation from the controller.
    env.server
        .store()
        .create(CRR, crr("c4", "p1", json!({})))
        .unwrap();
    let c4 = env
        .wait_crr("c4", |c| {
            c.pointer("/metadata/labels")
                .is_some_and(|l| l.get(manager::LABEL_ACTIVE).is_some())
        })
        .await;
    assert_eq!(
        c4["spec"]["containers"][0]["statusContext"]["restartCount"],
        2
    );
}

#[tokio::test]
async fn sync_container_statuses_while_recreating() {
    let env = start(Duration::from_secs(60)).await;
    env.server
        .store()
        .create("pods", pod("p1", "2020-01-01T00:00:00Z"))
        .unwrap();
    manager::create_crr(&env.client, crr("c1", "p1", json!({})))
        .await
        .unwrap();
    // Not Recreating yet: no annotation.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        env.crr("c1")
            .unwrap()
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(manager::ANNOTATION_SYNC_STATUSES))
            .is_none()
    );
    env.set_phase("c1", "Recreating");
    // Both containers started before the CRR: an empty list.
    let key = manager::ANNOTATION_SYNC_STATUSES;
    env.wait_crr("c1", |c| c["metadata"]["annotations"][key] == "[]")
        .await;
    // The main container restarted after the CRR was created: it appears, in kruise's field order.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    env.server.store().merge_patch("pods", NS, "p1", json!({"status": {"containerStatuses": [
        {"name": "main", "containerID": "containerd://ccc", "restartCount": 3, "ready": true,
         "state": {"running": {"startedAt": now_rfc3339()}}},
        {"name": "side", "containerID": "containerd://bbb", "restartCount": 0, "ready": true,
         "state": {"running": {"startedAt": "2020-01-01T00:00:00Z"}}}
    ]}})).unwrap();
    let want =
        r#"[{"name":"main","ready":true,"restartCount":3,"containerID":"containerd://ccc"}]"#;
    env.wait_crr("c1", |c| c["metadata"]["annotations"][key] == want)
        .await;
}

#[tokio::test]
async fn completes_when_pod_gone_or_replaced_and_drops_active_label() {
    let env = start(Duration::from_secs(60)).await;
    env.server
        .store()
        .create("pods", pod("p1", &now_rfc3339()))
        .unwrap();
    env.server
        .store()
        .create("pods", pod("p2", &now_rfc3339()))
        .unwrap();
    manager::create_crr(&env.client, crr("gone", "p1", json!({})))
        .await
        .unwrap();
    manager::create_crr(&env.client, crr("replaced", "p2", json!({})))
        .await
        .unwrap();
    env.set_phase("gone", "Recreating");
    env.server.store().delete("pods", NS, "p1").unwrap();
    // Same name, new UID.
    env.server.store().delete("pods", NS, "p2").unwrap();
    env.server
        .store()
        .create("pods", pod("p2", &now_rfc3339()))
        .unwrap();
    for name in ["gone", "replaced"] {
        let c = env
            .wait_crr(name, |c| c["status"]["phase"] == "Completed")
            .await;
        assert_eq!(c["status"]["message"], manager::MSG_POD_GONE);
        assert!(c["status"]["completionTime"].is_string());
        let c = env
            .wait_crr(name, |c| {
                c["metadata"]["labels"].get(manager::LABEL_ACTIVE).is_none()
            })
            .await;
        assert_eq!(c["metadata"]["labels"][manager::LABEL_NODE_NAME], "node-a");
    }
}

#[tokio::test]
async fn unanswered_crr_fails_after_the_response_timeout() {
    let env = start(Duration::from_secs(2)).await;
    env.server
        .store()
        .create("pods", pod("p1", &now_rfc3339()))
        .unwrap();
    manager::create_crr(&env.client, crr("quiet", "p1", json!({})))
        .await
        .unwrap();
    manager::create_crr(&env.client, crr("answered", "p1", json!({})))
        .await
        .unwrap();
    env.set_phase("answered", "Pending");
    let started = Instant::now();
    let c = env
        .wait_crr("quiet", |c| c["status"]["phase"] == "Completed")
        .await;
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(c["status"]["message"], manager::MSG_NO_RESPONSE);
    // A CRR the daemon moved out of "" is left alone.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(env.crr("answered").unwrap()["status"]["phase"], "Pending");
}

#[tokio::test]
async fn active_deadline_ttl_and_unready_acquisition() {
    let env = start(Duration::from_secs(60)).await;
    env.server
        .store()
        .create("pods", pod("p1", &now_rfc3339()))
        .unwrap();
    let name = unique_name("deadline");
    manager::create_crr(
        &env.client,
        crr(
            &name,
            "p1",
            // The deadline leaves the manager's first pass (which acquires unready) ample time
            // on a loaded machine: at 1 s a slow first pass went straight to the deadline.
            json!({"activeDeadlineSeconds": 4, "ttlSecondsAfterFinished": 1,
                                "strategy": {"unreadyGracePeriodSeconds": 3}}),
        ),
    )
    .await
    .unwrap();
    env.set_phase(&name, "Recreating");
    let c = env
        .wait_crr(&name, |c| {
            c["metadata"]["annotations"]
                .get(manager::ANNOTATION_UNREADY_ACQUIRED)
                .is_some()
        })
        .await;
    assert!(
        c["metadata"]["finalizers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == manager::FINALIZER_UNREADY)
    );
    let c = env
        .wait_crr(&name, |c| c["status"]["phase"] == "Completed")
        .await;
    assert_eq!(c["status"]["message"], manager::MSG_DEADLINE);
    // TTL: removed a second after completion (the finalizer is released first).
    let deadline = Instant::now() + Duration::from_secs(10);
    while env.crr(&name).is_some() {
        assert!(
            Instant::now() < deadline,
            "not deleted: {:#?}",
            env.crr(&name)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
