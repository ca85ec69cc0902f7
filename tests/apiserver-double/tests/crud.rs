//! get/create/update/delete through kube-rs: server-owned metadata, conflicts, finalizers,
//! errors as Status objects, pagination, discovery, kubeconfig.

mod common;

use apiserver_double::ServerConfig;
use common::*;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Event as CoreEvent, LimitRange, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::discovery::{Discovery, Scope};
use serde_json::json;

fn resize_request_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("inplaced.io", "v1alpha1", "ContainerResizeRequest"),
        "containerresizerequests",
    )
}

#[tokio::test]
async fn create_sets_server_owned_metadata_and_generate_name() {
    let server = server().await;
    let api: Api<Pod> = Api::namespaced(client(&server).await, "default");
    let mut p: Pod = typed(pod("", "n"));
    p.metadata.name = None;
    p.metadata.generate_name = Some("web-".into());
    let created = api.create(&PostParams::default(), &p).await.unwrap();
    let name = created.metadata.name.clone().unwrap();
    assert!(name.starts_with("web-") && name.len() == 9, "{name}");
    assert!(created.metadata.uid.is_some());
    assert!(created.metadata.creation_timestamp.is_some());
    assert_eq!(created.metadata.generation, Some(1));
    assert_eq!(
        created.metadata.resource_version.as_deref(),
        Some(server.store().resource_version().to_string().as_str())
    );
    let status = created.status.clone().unwrap();
    assert_eq!(status.phase.as_deref(), Some("Pending"));
    assert_eq!(status.qos_class.as_deref(), Some("Burstable"));

    let (code, reason) = api_code(api.create(&PostParams::default(), &created).await);
    assert_eq!(
        (code, reason.as_str()),
        (400, "BadRequest"),
        "resourceVersion set on create"
    );
    let mut again: Pod = typed(pod(&name, "n"));
    again.metadata.resource_version = None;
    assert_eq!(
        api_code(api.create(&PostParams::default(), &again).await).1,
        "AlreadyExists"
    );
    assert_eq!(api_code(api.get("missing").await), (404, "NotFound".into()));
}

#[tokio::test]
async fn update_with_stale_resource_version_conflicts() {
    let server = server().await;
    let client = client(&server).await;
    let api: Api<Node> = Api::all(client);
    let node: Node = typed(json!({"metadata": {"name": "n1", "labels": {"a": "1"}}}));
    let v1 = api.create(&PostParams::default(), &node).await.unwrap();
    let mut v2 = v1.clone();
    v2.metadata.labels = Some([("a".to_string(), "2".to_string())].into());
    let v2 = api
        .replace("n1", &PostParams::default(), &v2)
        .await
        .unwrap();
    assert_ne!(v1.metadata.resource_version, v2.metadata.resource_version);

    let mut stale = v1.clone();
    stale.metadata.labels = Some([("a".to_string(), "3".to_string())].into());
    match api.replace("n1", &PostParams::default(), &stale).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 409);
            assert_eq!(s.reason, "Conflict");
            assert!(
                s.message.ends_with(
                    "the object has been modified; please apply your changes to the latest version and try again"
                ),
                "{}",
                s.message
            );
        }
        other => panic!("expected conflict, got {other:?}"),
    }
    // A patch carrying the stale version conflicts too; one without it applies.
    let stale_patch = json!({"metadata": {"resourceVersion": v1.metadata.resource_version, "labels": {"b": "1"}}});
    assert_eq!(
        api_code(
            api.patch("n1", &PatchParams::default(), &Patch::Merge(&stale_patch))
                .await
        )
        .0,
        409
    );
    api.patch(
        "n1",
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"labels": {"b": "1"}}})),
    )
    .await
    .unwrap();

    // A no-op update keeps the resourceVersion.
    let cur = api.get("n1").await.unwrap();
    let same = api
        .replace("n1", &PostParams::default(), &cur)
        .await
        .unwrap();
    assert_eq!(
        same.metadata.resource_version,
        cur.metadata.resource_version
    );
}

#[tokio::test]
async fn a_write_naming_another_uid_is_refused_and_a_blank_uid_keeps_the_stored_one() {
    let server = server().await;
    let api: Api<Pod> = Api::namespaced(client(&server).await, "default");
    let first = api
        .create(&PostParams::default(), &typed(pod("web-0", "n")))
        .await
        .unwrap();
    let first_uid = first.metadata.uid.clone().unwrap();
    api.delete("web-0", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    let second = api
        .create(&PostParams::default(), &typed(pod("web-0", "n")))
        .await
        .unwrap();
    assert_ne!(second.metadata.uid.as_deref(), Some(first_uid.as_str()));

    // A status patch meant for the predecessor (its UID as a precondition) changes nothing.
    let for_first = json!({"metadata": {"uid": first_uid, "annotations": {"a": "1"}}});
    let (code, reason) = api_code(
        api.patch_status("web-0", &PatchParams::default(), &Patch::Merge(&for_first))
            .await,
    );
    assert_eq!((code, reason.as_str()), (422, "Invalid"));
    let now = api.get("web-0").await.unwrap();
    assert_eq!(
        now.metadata.resource_version,
        second.metadata.resource_version
    );
    assert!(
        !now.metadata
            .annotations
            .unwrap_or_default()
            .contains_key("a")
    );

    // The right UID applies, and so does a body without one.
    let for_second = json!({"metadata": {"uid": second.metadata.uid, "annotations": {"a": "2"}}});
    api.patch_status("web-0", &PatchParams::default(), &Patch::Merge(&for_second))
        .await
        .unwrap();
    let mut blank = api.get("web-0").await.unwrap();
    blank.metadata.uid = None;
    let replaced = api
        .replace("web-0", &PostParams::default(), &blank)
        .await
        .unwrap();
    assert_eq!(replaced.metadata.uid, second.metadata.uid);
    assert_eq!(
        replaced
            .metadata
            .annotations
            .unwrap_or_default()
            .get("a")
            .map(String::as_str),
        Some("2")
    );
}

#[tokio::test]
async fn custom_resource_update_requires_resource_version_and_bumps_generation() {
    let server = server().await;
    let ar = resize_request_resource();
    let api: Api<DynamicObject> = Api::namespaced_with(client(&server).await, "default", &ar);
    let obj: DynamicObject = typed(json!({
        "apiVersion": "inplaced.io/v1alpha1", "kind": "ContainerResizeRequest",
        "metadata": {"name": "r1"}, "spec": {"container": "app", "cpu": "200m"},
        "status": {"phase": "ignored-on-create"}
    }));
    let created = api.create(&PostParams::default(), &obj).await.unwrap();
    assert!(
        created.data.get("status").is_none(),
        "status is dropped on create"
    );
    assert_eq!(created.metadata.generation, Some(1));

    let mut no_rv = created.clone();
    no_rv.metadata.resource_version = None;
    assert_eq!(
        api_code(api.replace("r1", &PostParams::default(), &no_rv).await).0,
        422
    );

    let mut changed = created.clone();
    changed.data["spec"]["cpu"] = json!("300m");
    let updated = api
        .replace("r1", &PostParams::default(), &changed)
        .await
        .unwrap();
    assert_eq!(updated.metadata.generation, Some(2));
    let relabeled = api
        .patch(
            "r1",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .unwrap();
    assert_eq!(
        relabeled.metadata.generation,
        Some(2),
        "metadata changes keep generation"
    );
    // A custom resource's status endpoint keeps the stored metadata: a wrong UID in the body
    // is dropped, not refused (the real CR status strategy copies the stored object).
    let status = api
        .patch_status(
            "r1",
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"metadata": {"uid": "not-its-uid"}, "status": {"phase": "Done"}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(status.data["status"]["phase"], "Done");
    assert_eq!(status.metadata.uid, created.metadata.uid);
}

#[tokio::test]
async fn delete_waits_for_finalizers() {
    let server = server().await;
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apps.kruise.io", "v1alpha1", "ContainerRecreateRequest"),
        "containerrecreaterequests",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(client(&server).await, "default", &ar);
    let obj: DynamicObject = typed(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "ContainerRecreateRequest",
        "metadata": {"name": "crr", "finalizers": ["inplaced.io/cleanup"]},
        "spec": {"podName": "p", "containers": [{"name": "app"}]}
    }));
    api.create(&PostParams::default(), &obj).await.unwrap();
    let pending = api.delete("crr", &DeleteParams::default()).await.unwrap();
    let kept = pending
        .left()
        .expect("object returned while finalizers remain");
    assert!(kept.metadata.deletion_timestamp.is_some());
    assert!(api.get("crr").await.is_ok());

    // No new finalizers once deleting.
    let add = json!({"metadata": {"finalizers": ["inplaced.io/cleanup", "other"]}});
    assert_eq!(
        api_code(
            api.patch("crr", &PatchParams::default(), &Patch::Merge(&add))
                .await
        )
        .0,
        422
    );

    let clear = json!({"metadata": {"finalizers": null}});
    api.patch("crr", &PatchParams::default(), &Patch::Merge(&clear))
        .await
        .unwrap();
    assert_eq!(api_code(api.get("crr").await).0, 404);

    // Without finalizers a custom resource is gone at once and a Status comes back.
    let mut plain = obj.clone();
    plain.metadata.finalizers = None;
    api.create(&PostParams::default(), &plain).await.unwrap();
    let gone = api.delete("crr", &DeleteParams::default()).await.unwrap();
    assert!(gone.is_right());
    assert_eq!(
        api_code(api.delete("crr", &DeleteParams::default()).await).0,
        404
    );
}

#[tokio::test]
async fn delete_preconditions_and_graceful_pods() {
    let server = server_with(ServerConfig {
        graceful_pod_deletion: true,
        ..Default::default()
    })
    .await;
    let api: Api<Pod> = Api::namespaced(client(&server).await, "default");
    let p = api
        .create(&PostParams::default(), &typed(pod("p", "node-1")))
        .await
        .unwrap();
    let wrong = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: Some("not-the-uid".into()),
            resource_version: None,
        }),
        ..Default::default()
    };
    assert_eq!(api_code(api.delete("p", &wrong).await).0, 409);
    let terminating = api
        .delete("p", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert_eq!(terminating.metadata.deletion_grace_period_seconds, Some(30));
    assert!(
        api.get("p").await.is_ok(),
        "kept until the kubelet confirms"
    );
    api.delete("p", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    assert_eq!(api_code(api.get("p").await).0, 404);
    let _ = p;
}

#[tokio::test]
async fn list_pagination_and_expired_continue() {
    let server = server_with(ServerConfig {
        history_limit: 2,
        ..Default::default()
    })
    .await;
    for i in 0..5 {
        server
            .store()
            .create("pods", pod(&format!("p{i}"), "n"))
            .unwrap();
    }
    let api: Api<Pod> = Api::namespaced(client(&server).await, "default");
    let page1 = api.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(page1.items.len(), 2);
    assert_eq!(page1.metadata.remaining_item_count, Some(3));
    let token = page1.metadata.continue_.clone().unwrap();
    // A change between pages is not seen: pages come from the first page's snapshot.
    server.store().delete("pods", "default", "p4").unwrap();
    let page2 = api
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .unwrap();
    let page3 = api
        .list(
            &ListParams::default()
                .limit(2)
                .continue_token(page2.metadata.continue_.as_deref().unwrap()),
        )
        .await
        .unwrap();
    let names: Vec<String> = page2
        .items
        .iter()
        .chain(&page3.items)
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, vec!["p2", "p3", "p4"]);
    assert_eq!(page3.metadata.continue_, None);

    // Once history moves on, the token is too old: 410 Expired.
    for i in 5..9 {
        server
            .store()
            .create("pods", pod(&format!("p{i}"), "n"))
            .unwrap();
    }
    let (code, reason) = api_code(
        api.list(&ListParams::default().limit(2).continue_token(&token))
            .await,
    );
    assert_eq!((code, reason.as_str()), (410, "Expired"));

    // resourceVersion=0 lists ignore limit, as the watch cache does (kube-rs itself never
    // sends both, so ask directly).
    let req = http::Request::get("/api/v1/namespaces/default/pods?resourceVersion=0&limit=2")
        .body(vec![])
        .unwrap();
    let all: kube::core::ObjectList<Pod> = api.clone().into_client().request(req).await.unwrap();
    assert_eq!(all.items.len(), 8);
}

#[tokio::test]
async fn events_are_created_in_both_apis() {
    let server = server().await;
    let client = client(&server).await;
    let core: Api<CoreEvent> = Api::namespaced(client.clone(), "default");
    let ev: CoreEvent = typed(json!({
        "metadata": {"generateName": "p."},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
        "reason": "Resized", "message": "cpu 100m -> 200m", "type": "Normal"
    }));
    core.create(&PostParams::default(), &ev).await.unwrap();
    let found = core
        .list(&ListParams::default().fields("involvedObject.name=p,reason=Resized"))
        .await
        .unwrap();
    assert_eq!(found.items.len(), 1);
    let new_api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client, "default");
    let e2: k8s_openapi::api::events::v1::Event = typed(json!({
        "metadata": {"name": "p.1"}, "eventTime": "2025-01-01T00:00:00.000000Z",
        "reportingController": "inplaced.io/agent", "reportingInstance": "node-1",
        "action": "Resize", "reason": "Resized", "type": "Normal",
        "regarding": {"kind": "Pod", "name": "p", "namespace": "default"}
    }));
    new_api.create(&PostParams::default(), &e2).await.unwrap();
    assert_eq!(
        server.store().list("events.events.k8s.io", "default").len(),
        1
    );
}

#[tokio::test]
async fn discovery_and_version() {
    let server = server().await;
    let client = client(&server).await;
    let version = client.apiserver_version().await.unwrap();
    assert_eq!(version.major, "1");
    for discovery in [
        Discovery::new(client.clone()).run().await.unwrap(),
        Discovery::new(client.clone())
            .run_aggregated()
            .await
            .unwrap(),
    ] {
        let (ar, caps) = discovery
            .resolve_gvk(&GroupVersionKind::gvk(
                "inplaced.io",
                "v1alpha1",
                "ContainerResizeRequest",
            ))
            .expect("CRD discovered");
        assert_eq!(ar.plural, "containerresizerequests");
        assert_eq!(caps.scope, Scope::Namespaced);
        assert!(
            caps.subresources
                .iter()
                .any(|(s, _)| s.plural == "containerresizerequests/status" || s.plural == "status")
        );
        let (pods, _) = discovery
            .resolve_gvk(&GroupVersionKind::gvk("", "v1", "Pod"))
            .expect("pods");
        assert_eq!(pods.plural, "pods");
        assert!(
            discovery
                .resolve_gvk(&GroupVersionKind::gvk("", "v1", "Node"))
                .is_some()
        );
        let (limits, caps) = discovery
            .resolve_gvk(&GroupVersionKind::gvk("", "v1", "LimitRange"))
            .expect("limitranges");
        assert_eq!(limits.plural, "limitranges");
        assert_eq!(caps.scope, Scope::Namespaced);
        assert!(
            discovery
                .resolve_gvk(&GroupVersionKind::gvk(
                    "apps.kruise.io",
                    "v1alpha1",
                    "ContainerRecreateRequest"
                ))
                .is_some()
        );
    }
}

#[tokio::test]
async fn malformed_requests_get_status_not_panics() {
    let server = server().await;
    let client = client(&server).await;
    let raw = |method: &str, path: &str, body: &str, ct: &str| {
        http::Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", ct)
            .body(body.as_bytes().to_vec())
            .unwrap()
    };
    for (method, path, body, ct, want) in [
        (
            "POST",
            "/api/v1/namespaces/default/pods",
            "{not json",
            "application/json",
            400,
        ),
        (
            "POST",
            "/api/v1/namespaces/default/pods",
            "[1,2]",
            "application/json",
            400,
        ),
        (
            "POST",
            "/api/v1/namespaces/default/pods",
            "{\"metadata\":{}}",
            "application/json",
            422,
        ),
        ("GET", "/api/v1/pods?labelSelector=a%20in%20b", "", "", 400),
        ("GET", "/api/v1/pods?limit=abc", "", "", 400),
        ("GET", "/api/v1/pods?continue=zz", "", "", 400),
        (
            "GET",
            "/api/v1/pods?watch=true&resourceVersion=x",
            "",
            "",
            400,
        ),
        ("GET", "/api/v1/namespaces/default/widgets", "", "", 404),
        ("GET", "/api/v1/namespaces/default/pods/p/exec", "", "", 404),
        (
            "PATCH",
            "/api/v1/nodes/n",
            "{}",
            "application/apply-patch+yaml",
            415,
        ),
        ("PUT", "/api/v1/nodes", "{}", "application/json", 405),
    ] {
        let req = raw(method, path, body, ct);
        let resp: Result<serde_json::Value, _> = client.request(req).await;
        match resp {
            Err(kube::Error::Api(s)) => assert_eq!(s.code, want, "{method} {path}: {s:?}"),
            other => panic!("{method} {path}: expected {want}, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn exact_list_rebuilds_an_older_snapshot_and_deletecollection() {
    use kube::api::VersionMatch;
    let server = server().await;
    let store = server.store();
    store.create("pods", pod("a", "n")).unwrap();
    store.create("pods", pod("b", "n")).unwrap();
    let then = store.resource_version().to_string();
    store
        .merge_patch(
            "pods",
            "default",
            "a",
            json!({"metadata": {"labels": {"app": "changed"}}}),
        )
        .unwrap();
    store.delete("pods", "default", "b").unwrap();
    store.create("pods", pod("c", "n")).unwrap();

    let api: Api<Pod> = Api::namespaced(client(&server).await, "default");
    let old = api
        .list(
            &ListParams::default()
                .at(&then)
                .matching(VersionMatch::Exact),
        )
        .await
        .unwrap();
    assert_eq!(
        old.metadata.resource_version.as_deref(),
        Some(then.as_str())
    );
    let names: Vec<(String, String)> = old
        .items
        .iter()
        .map(|p| {
            (
                p.metadata.name.clone().unwrap(),
                p.metadata.labels.clone().unwrap()["app"].clone(),
            )
        })
        .collect();
    assert_eq!(
        names,
        vec![("a".into(), "web".into()), ("b".into(), "web".into())]
    );
    let future = (store.resource_version() + 10).to_string();
    // kube-rs retries 504 by default (after Retry-After: 1); look at the first answer.
    let no_retry: Api<Pod> = Api::namespaced(client_no_retry(&server).await, "default");
    let lp = ListParams::default()
        .at(&future)
        .matching(VersionMatch::NotOlderThan);
    let (code, _) = api_code(no_retry.list(&lp).await);
    assert_eq!(code, 504);

    let deleted = api
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("app=web"),
        )
        .await
        .unwrap();
    let deleted = deleted.left().expect("list of deleted objects");
    assert_eq!(deleted.items.len(), 1);
    assert_eq!(store.list("pods", "default").len(), 1);
}

#[tokio::test]
async fn limit_ranges_are_served_like_other_namespaced_resources() {
    let server = server().await;
    let client = client(&server).await;
    let api: Api<LimitRange> = Api::namespaced(client.clone(), "default");
    let mut watch = api
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    let created = api
        .create(
            &PostParams::default(),
            &typed(json!({
                "apiVersion": "v1", "kind": "LimitRange",
                "metadata": {"name": "defaults"},
                "spec": {"limits": [{"type": "Container",
                    "default": {"cpu": "500m", "memory": "256Mi"},
                    "defaultRequest": {"cpu": "100m", "memory": "64Mi"},
                    "max": {"cpu": "2", "memory": "1Gi"}}]}
            })),
        )
        .await
        .unwrap();
    assert!(created.metadata.uid.is_some());
    let event = tokio::time::timeout(std::time::Duration::from_secs(5), watch.next())
        .await
        .expect("a watch event")
        .expect("stream open")
        .unwrap();
    assert!(
        matches!(&event, kube::api::WatchEvent::Added(lr) if lr.metadata.name.as_deref() == Some("defaults")),
        "{event:?}"
    );
    // The test API creates them too, in another namespace.
    server
        .store()
        .create(
            "limitranges",
            json!({"metadata": {"name": "other", "namespace": "team-b"},
                   "spec": {"limits": [{"type": "Pod", "max": {"cpu": "4"}}]}}),
        )
        .unwrap();
    let got = api.get("defaults").await.unwrap();
    let item = &got.spec.unwrap().limits[0];
    assert_eq!(item.type_, "Container");
    assert_eq!(item.max.as_ref().unwrap()["cpu"].0, "2");
    let names = |list: kube::api::ObjectList<LimitRange>| -> Vec<String> {
        list.items
            .into_iter()
            .filter_map(|l| l.metadata.name)
            .collect()
    };
    assert_eq!(
        names(api.list(&ListParams::default()).await.unwrap()),
        ["defaults"]
    );
    let all: Api<LimitRange> = Api::all(client);
    let mut everywhere = names(all.list(&ListParams::default()).await.unwrap());
    everywhere.sort();
    assert_eq!(everywhere, ["defaults", "other"]);
}
