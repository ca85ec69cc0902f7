//! Each patch type through kube-rs, and label/field selectors on lists.

mod common;

use common::*;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

async fn pods() -> (apiserver_double::ApiServer, Api<Pod>) {
    let server = server().await;
    let api = Api::namespaced(client(&server).await, "default");
    (server, api)
}

#[tokio::test]
async fn json_merge_patch_replaces_lists_and_deletes_nulls() {
    let (_s, api) = pods().await;
    let mut p = pod("p", "n");
    p["metadata"]["labels"] = json!({"a": "1", "b": "2"});
    api.create(&PostParams::default(), &typed(p)).await.unwrap();
    let out = api
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {"a": null, "c": "3"}}})),
        )
        .await
        .unwrap();
    let labels = out.metadata.labels.unwrap();
    assert!(!labels.contains_key("a"));
    assert_eq!(labels["c"], "3");
}

#[tokio::test]
async fn strategic_merge_patch_merges_containers_by_name() {
    let (_s, api) = pods().await;
    let mut p = pod("p", "n");
    p["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "side", "image": "side:1"}));
    p["spec"]["containers"][0]["env"] = json!([{"name": "A", "value": "1"}]);
    api.create(&PostParams::default(), &typed(p)).await.unwrap();
    let patch = json!({"spec": {"containers": [{"name": "side", "image": "side:2"}]}});
    let out = api
        .patch("p", &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .unwrap();
    let cs = out.spec.unwrap().containers;
    assert_eq!(cs.len(), 2);
    assert_eq!(cs[0].image.as_deref(), Some("busybox:1"));
    assert_eq!(cs[0].env.as_ref().unwrap().len(), 1);
    assert_eq!(cs[1].image.as_deref(), Some("side:2"));

    // Status conditions merge by type through pods/status.
    let c1 = json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}});
    let c2 = json!({"status": {"conditions": [{"type": "PodResizePending", "status": "True"}]}});
    for c in [c1, c2] {
        api.patch_status("p", &PatchParams::default(), &Patch::Strategic(&c))
            .await
            .unwrap();
    }
    let st = api.get_status("p").await.unwrap().status.unwrap();
    assert_eq!(st.conditions.unwrap().len(), 2);
}

#[tokio::test]
async fn json_patch_applies_and_test_op_failure_is_invalid() {
    let (_s, api) = pods().await;
    api.create(&PostParams::default(), &typed(pod("p", "n")))
        .await
        .unwrap();
    let ops = json!([
        {"op": "test", "path": "/metadata/labels/app", "value": "web"},
        {"op": "add", "path": "/metadata/annotations", "value": {"x": "y"}}
    ]);
    let out = api
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Json::<()>(serde_json::from_value(ops).unwrap()),
        )
        .await
        .unwrap();
    assert_eq!(out.metadata.annotations.unwrap()["x"], "y");
    let failing = json!([{"op": "test", "path": "/metadata/labels/app", "value": "db"}]);
    let (code, _) = api_code(
        api.patch(
            "p",
            &PatchParams::default(),
            &Patch::Json::<()>(serde_json::from_value(failing).unwrap()),
        )
        .await,
    );
    assert_eq!(code, 422);
    // Server-side apply is not offered.
    let apply = api
        .patch(
            "p",
            &PatchParams::apply("test"),
            &Patch::Apply(&json!({"metadata": {}})),
        )
        .await;
    assert_eq!(api_code(apply).0, 415);
}

#[tokio::test]
async fn label_selectors_on_lists() {
    let (server, api) = pods().await;
    for (name, labels) in [
        ("a", json!({"app": "web", "tier": "front"})),
        ("b", json!({"app": "db"})),
        ("c", json!({})),
    ] {
        let mut p = pod(name, "n");
        p["metadata"]["labels"] = labels;
        server.store().create("pods", p).unwrap();
    }
    let names = |l: kube::core::ObjectList<Pod>| -> Vec<String> {
        l.items
            .into_iter()
            .map(|p| p.metadata.name.unwrap())
            .collect()
    };
    for (sel, want) in [
        ("app=web", vec!["a"]),
        ("app!=web", vec!["b", "c"]),
        ("app in (web,db)", vec!["a", "b"]),
        ("app notin (web)", vec!["b", "c"]),
        ("tier", vec!["a"]),
        ("!app", vec!["c"]),
        ("app,tier=front", vec!["a"]),
    ] {
        let got = names(api.list(&ListParams::default().labels(sel)).await.unwrap());
        assert_eq!(got, want, "selector {sel}");
    }
    let bad = api.list(&ListParams::default().labels("app in web")).await;
    assert_eq!(api_code(bad).0, 400);
}

#[tokio::test]
async fn field_selectors_on_lists() {
    let (server, api) = pods().await;
    server.store().create("pods", pod("a", "node-1")).unwrap();
    server.store().create("pods", pod("b", "node-2")).unwrap();
    let mut other_ns = pod("c", "node-1");
    other_ns["metadata"]["namespace"] = json!("kube-system");
    server.store().create("pods", other_ns).unwrap();

    let all: Api<Pod> = Api::all(api.clone().into_client());
    let on_node = all
        .list(&ListParams::default().fields("spec.nodeName=node-1"))
        .await
        .unwrap();
    assert_eq!(on_node.items.len(), 2);
    let here = api
        .list(&ListParams::default().fields("spec.nodeName=node-1"))
        .await
        .unwrap();
    assert_eq!(here.items.len(), 1);
    let by_name = all
        .list(&ListParams::default().fields("metadata.name=b,metadata.namespace=default"))
        .await
        .unwrap();
    assert_eq!(by_name.items.len(), 1);
    let not = all
        .list(&ListParams::default().fields("spec.nodeName!=node-1"))
        .await
        .unwrap();
    assert_eq!(not.items.len(), 1);
    match all
        .list(&ListParams::default().fields("spec.bogus=1"))
        .await
    {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 400);
            assert_eq!(s.message, "field label not supported: spec.bogus");
        }
        other => panic!("expected 400, got {other:?}"),
    }
    let nodes: Api<Node> = Api::all(api.into_client());
    assert_eq!(
        api_code(
            nodes
                .list(&ListParams::default().fields("spec.nodeName=x"))
                .await
        )
        .0,
        400
    );
}
