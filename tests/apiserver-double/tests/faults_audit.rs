//! Each fault hook, authentication, and the audit log checked against an RBAC role.

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use apiserver_double::{Fault, RequestMatch, ServerConfig};
use common::*;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Event as CoreEvent, Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;
use tokio::time::timeout;

async fn setup() -> (apiserver_double::ApiServer, Api<Pod>) {
    let server = server().await;
    server.store().create("pods", pod("p", "n")).unwrap();
    let api = Api::namespaced(client_no_retry(&server).await, "default");
    (server, api)
}

#[tokio::test]
async fn kube_default_client_retries_429_after_retry_after() {
    let server = server().await;
    server.store().create("pods", pod("p", "n")).unwrap();
    let api: Api<Pod> = Api::namespaced(client(&server).await, "default");
    let id = server.faults().add(
        Fault::respond(429)
            .on(RequestMatch::any().verb("get"))
            .once(),
    );
    let t = Instant::now();
    api.get("p").await.expect("retried after Retry-After");
    assert!(t.elapsed() >= Duration::from_secs(1));
    assert_eq!(server.faults().fired(id), 1);
    let codes: Vec<u16> = server
        .audit()
        .resource_entries()
        .iter()
        .map(|e| e.code)
        .collect();
    assert_eq!(codes, vec![429, 200]);
}

#[tokio::test]
async fn respond_with_chosen_codes_on_chosen_requests() {
    let (server, api) = setup().await;
    for (code, reason) in [
        (410, "Expired"),
        (403, "Forbidden"),
        (429, "TooManyRequests"),
        (500, "InternalError"),
        (503, "ServiceUnavailable"),
    ] {
        let id = server.faults().add(
            Fault::respond(code)
                .on(RequestMatch::any().verb("get").resource("pods").name("p"))
                .once(),
        );
        assert_eq!(api_code(api.get("p").await), (code, reason.to_string()));
        assert_eq!(server.faults().fired(id), 1);
        api.get("p").await.expect("a once-fault fires once");
    }
    // Other requests are untouched by a narrowly matched fault.
    server
        .faults()
        .add(Fault::respond(500).on(RequestMatch::any().verb("list")));
    api.get("p").await.unwrap();
    assert_eq!(api_code(api.list(&ListParams::default()).await).0, 500);
    server.faults().clear();
    api.list(&ListParams::default()).await.unwrap();
}

#[tokio::test]
async fn too_many_requests_carries_retry_after_and_skip_counts() {
    let (server, api) = setup().await;
    server.faults().add(
        Fault::respond(429)
            .retry_after(7)
            .on(RequestMatch::any().resource("pods"))
            .skip(1)
            .times(2),
    );
    api.get("p").await.expect("first request skipped");
    let req = http::Request::get("/api/v1/namespaces/default/pods/p")
        .body(vec![])
        .unwrap();
    let resp = api.clone().into_client().send(req.map(Into::into)).await;
    let resp = resp.unwrap();
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "7");
    assert_eq!(api_code(api.get("p").await).0, 429);
    api.get("p").await.expect("used up after two");
}

#[tokio::test]
async fn delay_slows_matching_requests() {
    let (server, api) = setup().await;
    server
        .faults()
        .add(Fault::delay(Duration::from_millis(300)).on(RequestMatch::any().verb("get")));
    let t = Instant::now();
    api.get("p").await.unwrap();
    assert!(t.elapsed() >= Duration::from_millis(300));
    api.list(&ListParams::default()).await.unwrap();
    // Judged by the audit log, not the clock, so a loaded machine cannot flake it.
    let faults: Vec<Option<String>> = server
        .audit()
        .resource_entries()
        .into_iter()
        .map(|e| e.fault)
        .collect();
    assert_eq!(faults, vec![Some("delay 300ms".to_string()), None]);
}

#[tokio::test]
async fn drop_watch_after_n_events_and_on_demand() {
    let (server, api) = setup().await;
    server.faults().add(Fault::drop_watch(1).once());
    let rv = server.store().resource_version().to_string();
    let mut s = api
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    server.store().create("pods", pod("q", "n")).unwrap();
    server.store().create("pods", pod("r", "n")).unwrap();
    let first = timeout(Duration::from_secs(5), s.try_next())
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(first, Some(WatchEvent::Added(_))));
    let end = timeout(Duration::from_secs(5), s.try_next()).await.unwrap();
    assert!(
        matches!(end, Ok(None)),
        "stream ends after one event: {end:?}"
    );

    // drop_watches() ends every open watch.
    let mut s = api
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    for _ in 0..2 {
        timeout(Duration::from_secs(5), s.try_next())
            .await
            .unwrap()
            .unwrap();
    }
    server.faults().drop_watches();
    let end = timeout(Duration::from_secs(5), s.try_next()).await.unwrap();
    assert!(matches!(end, Ok(None)), "{end:?}");
}

#[tokio::test]
async fn stalled_watches_deliver_late() {
    let (server, api) = setup().await;
    server
        .faults()
        .add(Fault::stall_watch(Duration::from_millis(400)).once());
    let rv = server.store().resource_version().to_string();
    let t = Instant::now();
    let mut s = api
        .watch(&WatchParams::default().disable_bookmarks(), &rv)
        .await
        .unwrap()
        .boxed();
    server.store().create("pods", pod("q", "n")).unwrap();
    timeout(Duration::from_secs(5), s.try_next())
        .await
        .unwrap()
        .unwrap();
    assert!(t.elapsed() >= Duration::from_millis(400));

    // Stalling open watches holds back events already flowing.
    server.faults().stall_watches(Duration::from_millis(400));
    let t = Instant::now();
    server.store().create("pods", pod("r", "n")).unwrap();
    timeout(Duration::from_secs(5), s.try_next())
        .await
        .unwrap()
        .unwrap();
    assert!(t.elapsed() >= Duration::from_millis(350));
}

#[tokio::test]
async fn outage_drops_connections_then_recovers() {
    let (server, api) = setup().await;
    let rv = server.store().resource_version().to_string();
    let mut s = api
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    server.faults().outage(Duration::from_millis(700));
    // The open watch is cut mid-stream (kube-rs reports an unexpected EOF as the end).
    let cut = timeout(Duration::from_secs(5), s.try_next()).await.unwrap();
    assert!(matches!(cut, Ok(None) | Err(_)), "{cut:?}");
    match api.get("p").await {
        Err(kube::Error::Api(s)) => panic!("expected a connection failure, got status {s:?}"),
        Err(_) => {}
        Ok(_) => panic!("request succeeded during outage"),
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    api.get("p").await.expect("server back after the outage");
    assert!(!server.faults().in_outage());
}

/// A request that came before an outage but is still being handled when it begins (here held
/// by a delay) is dropped too: a GET gets no answer, and a watch is not left open through the
/// outage (it would see the pod created below).
#[tokio::test]
async fn requests_delayed_into_an_outage_are_dropped() {
    let (server, api) = setup().await;
    for verb in ["get", "watch"] {
        server.faults().add(
            Fault::delay(Duration::from_millis(400))
                .on(RequestMatch::any().verb(verb))
                .once(),
        );
    }
    let rv = server.store().resource_version().to_string();
    let get = tokio::spawn({
        let api = api.clone();
        async move { api.get("p").await }
    });
    let watch = tokio::spawn({
        let api = api.clone();
        async move {
            let mut s = api.watch(&WatchParams::default(), &rv).await?.boxed();
            s.try_next().await
        }
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    server.faults().outage(Duration::from_secs(3));
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.store().create("pods", pod("q", "n")).unwrap();
    match timeout(Duration::from_secs(5), get).await.unwrap().unwrap() {
        Err(kube::Error::Api(s)) => panic!("expected a connection failure, got status {s:?}"),
        Err(_) => {}
        Ok(_) => panic!("a GET delayed into the outage was answered"),
    }
    match timeout(Duration::from_secs(5), watch)
        .await
        .unwrap()
        .unwrap()
    {
        Err(_) | Ok(None) => {}
        Ok(Some(event)) => panic!("a watch delayed into the outage stayed open: {event:?}"),
    }
    let dropped = server
        .audit()
        .resource_entries()
        .iter()
        .filter(|e| {
            e.code == 0
                && e.fault
                    .as_deref()
                    .is_some_and(|f| f.ends_with("then outage"))
        })
        .count();
    assert_eq!(dropped, 2);
}

#[tokio::test]
async fn faults_can_target_one_user() {
    let server = server_with(ServerConfig {
        tokens: HashMap::from([(
            "agent-token".into(),
            "system:serviceaccount:kube-system:inplaced".into(),
        )]),
        ..Default::default()
    })
    .await;
    server.store().create("pods", pod("p", "n")).unwrap();
    server.faults().add(
        Fault::respond(403)
            .on(RequestMatch::any().user("system:serviceaccount:kube-system:inplaced")),
    );
    let agent: Api<Pod> =
        Api::namespaced(client_for(&server, Some("agent-token")).await, "default");
    let anon: Api<Pod> = Api::namespaced(client(&server).await, "default");
    assert_eq!(api_code(agent.get("p").await).0, 403);
    anon.get("p").await.unwrap();
    let stranger: Api<Pod> = Api::namespaced(client_for(&server, Some("nope")).await, "default");
    assert_eq!(api_code(stranger.get("p").await).0, 401);
}

#[tokio::test]
async fn audit_log_records_calls_and_checks_them_against_rbac() {
    let server = server_with(ServerConfig {
        tokens: HashMap::from([(
            "t".into(),
            "system:serviceaccount:kube-system:inplaced".into(),
        )]),
        ..Default::default()
    })
    .await;
    server.store().create("pods", pod("p", "node-1")).unwrap();
    server
        .store()
        .create("nodes", json!({"metadata": {"name": "node-1"}}))
        .unwrap();
    let client = client_for(&server, Some("t")).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.get("p").await.unwrap();
    pods.patch_status(
        "p",
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": {"phase": "Running"}})),
    )
    .await
    .unwrap();
    let all: Api<Pod> = Api::all(client.clone());
    all.list(&ListParams::default().fields("spec.nodeName=node-1"))
        .await
        .unwrap();
    Api::<Node>::all(client.clone())
        .get("node-1")
        .await
        .unwrap();
    let ev: CoreEvent =
        typed(json!({"metadata": {"name": "e1"}, "involvedObject": {"kind": "Pod", "name": "p"}}));
    Api::<CoreEvent>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &ev)
        .await
        .unwrap();
    pods.delete("p", &Default::default()).await.unwrap();

    let entries = server.audit().resource_entries();
    let seen: Vec<(String, String, String, String, String, u16)> = entries
        .iter()
        .map(|e| {
            let r = &e.request;
            (
                r.verb.clone(),
                r.resource.clone(),
                r.subresource.clone(),
                r.namespace.clone(),
                r.name.clone(),
                e.code,
            )
        })
        .collect();
    let s = |v: &str| v.to_string();
    assert_eq!(
        seen,
        vec![
            (s("get"), s("pods"), s(""), s("default"), s("p"), 200),
            (
                s("patch"),
                s("pods"),
                s("status"),
                s("default"),
                s("p"),
                200
            ),
            (s("list"), s("pods"), s(""), s(""), s(""), 200),
            (s("get"), s("nodes"), s(""), s(""), s("node-1"), 200),
            (s("create"), s("events"), s(""), s("default"), s(""), 201),
            (s("delete"), s("pods"), s(""), s("default"), s("p"), 200),
        ]
    );
    assert!(
        entries
            .iter()
            .all(|e| e.request.user == "system:serviceaccount:kube-system:inplaced")
    );
    assert_eq!(entries[1].content_type, "application/merge-patch+json");

    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "inplaced"},
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch"]},
            {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"], "resourceNames": ["node-1"]},
            {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]}
        ]
    });
    let denied: Vec<String> = server
        .audit()
        .not_allowed_by(&json!([role]))
        .iter()
        .filter(|e| e.request.is_resource)
        .map(|e| format!("{} {}", e.request.verb, e.rbac_resource()))
        .collect();
    assert_eq!(denied, vec!["delete pods"]);

    // Non-resource requests are audited too and checked against nonResourceURLs.
    client.apiserver_version().await.unwrap();
    let denied = server.audit().not_allowed_by(&role);
    assert_eq!(
        denied.last().map(|e| e.request.path.as_str()),
        Some("/version")
    );
    let with_version = json!([role, {"kind": "ClusterRole", "rules": [{"nonResourceURLs": ["/version"], "verbs": ["get"]}]}]);
    assert!(
        server
            .audit()
            .not_allowed_by(&with_version)
            .iter()
            .all(|e| e.request.path != "/version")
    );
}

#[tokio::test]
async fn audit_wait_for_sees_a_later_request() {
    let (server, api) = setup().await;
    let waiter = async {
        server
            .audit()
            .wait_for(Duration::from_secs(5), |e| {
                e.request.verb == "get" && e.request.name == "p"
            })
            .await
    };
    let (found, _) = tokio::join!(waiter, async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        api.get("p").await.unwrap()
    });
    assert_eq!(found.unwrap().code, 200);
    let none = server
        .audit()
        .wait_for(Duration::from_millis(50), |e| e.request.verb == "delete")
        .await;
    assert!(none.is_none());
}

#[tokio::test]
async fn injected_410_on_watch_is_an_error_event_and_the_watcher_relists() {
    use kube::runtime::watcher::{self, Event};
    let (server, api) = setup().await;
    let rv = server.store().resource_version().to_string();
    server.faults().add(
        Fault::respond(410)
            .on(RequestMatch::any().verb("watch"))
            .once(),
    );
    let mut s = api
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    match timeout(Duration::from_secs(5), s.try_next())
        .await
        .unwrap()
        .unwrap()
    {
        Some(WatchEvent::Error(e)) => assert_eq!((e.code, e.reason.as_str()), (410, "Expired")),
        other => panic!("expected an ERROR event, got {other:?}"),
    }

    server.faults().add(
        Fault::respond(410)
            .on(RequestMatch::any().verb("watch"))
            .once(),
    );
    let mut w = watcher::watcher(api, watcher::Config::default()).boxed();
    let mut inits = 0;
    while inits < 2 {
        match timeout(Duration::from_secs(10), w.next()).await.unwrap() {
            Some(Ok(Event::InitDone)) => inits += 1,
            Some(_) => {}
            None => panic!("watcher ended"),
        }
    }
    let lists = server
        .audit()
        .resource_entries()
        .iter()
        .filter(|e| e.request.verb == "list")
        .count();
    assert_eq!(lists, 2, "410 made the watcher list again");
}
