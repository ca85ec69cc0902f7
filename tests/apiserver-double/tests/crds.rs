//! CustomResourceDefinitions: a custom resource is served while its CRD exists, as on a real
//! API server — a 404 on its paths and no group in discovery before, the resource and its
//! discovery from the moment the CRD is created, and when the CRD is deleted its objects go
//! (DELETED events), its open watches end, and its paths answer 404 again.

mod common;

use apiserver_double::ServerConfig;
use common::*;
use futures::StreamExt as _;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::discovery::Discovery;
use serde_json::json;

const RESIZE: &str = "containerresizerequests.inplaced.io";
const RESTART: &str = "containerrestartrequests.inplaced.io";
const UPGRADE_CHECKS: &str = "nodeupgradechecks.inplaced.io";
const ROLLOUTS: &str = "containerrestartrollouts.inplaced.io";

fn resize_requests() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("inplaced.io", "v1alpha1", "ContainerResizeRequest"),
        "containerresizerequests",
    )
}

/// The shipped CRD, as a platform team applies it.
fn shipped_crd() -> CustomResourceDefinition {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../packaging/kubernetes/crd-containerresizerequests.yaml"
    );
    let text = std::fs::read_to_string(path).expect("the shipped CRD");
    serde_yaml_ng::from_str(&text).expect("a CRD")
}

async fn group_discovered(client: kube::Client, group: &str) -> bool {
    let discovery = Discovery::new(client).run().await.expect("discovery");
    discovery.groups().any(|g| g.name() == group)
}

#[tokio::test]
async fn a_resource_without_its_crd_is_404_and_absent_from_discovery() {
    let server = server_with(ServerConfig {
        absent_crds: vec![
            RESIZE.into(),
            RESTART.into(),
            UPGRADE_CHECKS.into(),
            ROLLOUTS.into(),
            "containerrecreaterequests.apps.kruise.io".into(),
        ],
        ..Default::default()
    })
    .await;
    let client = client(&server).await;
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &resize_requests());
    // kube-apiserver's catch-all answer, `404 page not found` in plain text (no Status: kube-rs
    // names no reason), as tests/real_kube_double.rs saw it answer.
    let (code, reason) = api_code(api.list(&ListParams::default()).await);
    assert_eq!(code, 404);
    assert_ne!(reason, "NotFound");
    let (code, _) = api_code(api.watch(&WatchParams::default(), "0").await.map(|_| ()));
    assert_eq!(code, 404, "a watch of it");
    for path in [
        "/apis/inplaced.io/v1alpha1",
        "/apis/inplaced.io",
        "/apis/apps.kruise.io",
    ] {
        let request = http::Request::get(path).body(Vec::new()).expect("request");
        let (code, _) = api_code(client.request_text(request).await);
        assert_eq!(code, 404, "discovery of {path}");
    }
    // Audited as what the path names, as kube-apiserver's RequestInfo does.
    let audited = server.audit().entries();
    let list = audited
        .iter()
        .find(|e| e.request.verb == "list")
        .expect("the list is audited");
    assert_eq!(
        (
            list.request.is_resource,
            list.request.api_group.as_str(),
            list.request.resource.as_str(),
            list.request.namespace.as_str(),
            list.code
        ),
        (
            true,
            "inplaced.io",
            "containerresizerequests",
            "default",
            404
        )
    );
    assert!(
        audited
            .iter()
            .any(|e| e.request.verb == "watch" && e.code == 404)
    );
    assert!(!group_discovered(client.clone(), "inplaced.io").await);
    assert!(!group_discovered(client.clone(), "apps.kruise.io").await);
    assert!(
        group_discovered(client, "policy").await,
        "built-in groups are"
    );
}

/// One resource of a group installed: the group is discovered with that resource only.
#[tokio::test]
async fn a_group_lists_only_the_resources_whose_crds_exist() {
    let server = server_with(ServerConfig {
        absent_crds: vec![RESIZE.into(), UPGRADE_CHECKS.into(), ROLLOUTS.into()],
        ..Default::default()
    })
    .await;
    let client = client(&server).await;
    let request = http::Request::get("/apis/inplaced.io/v1alpha1")
        .body(Vec::new())
        .expect("request");
    let text = client.request_text(request).await.expect("discovered");
    let list: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let names: Vec<&str> = list["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "containerrestartrequests",
            "containerrestartrequests/status"
        ]
    );
    let api: Api<DynamicObject> = Api::namespaced_with(client, "default", &resize_requests());
    let (code, _) = api_code(api.list(&ListParams::default()).await);
    assert_eq!(code, 404);
}

#[tokio::test]
async fn creating_the_shipped_crd_serves_the_resource_and_establishes_it() {
    let server = server_with(ServerConfig {
        absent_crds: vec![
            RESIZE.into(),
            RESTART.into(),
            UPGRADE_CHECKS.into(),
            ROLLOUTS.into(),
        ],
        ..Default::default()
    })
    .await;
    let client = client(&server).await;
    assert!(!group_discovered(client.clone(), "inplaced.io").await);
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let created = crds
        .create(&PostParams::default(), &shipped_crd())
        .await
        .expect("the CRD is created");
    let conditions = created
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default();
    assert!(
        conditions
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True"),
        "{conditions:?}"
    );
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &resize_requests());
    assert!(api.list(&ListParams::default()).await.is_ok());
    assert!(group_discovered(client, "inplaced.io").await);
}

#[tokio::test]
async fn deleting_a_crd_deletes_its_objects_ends_its_watches_and_unserves_it() {
    let server = server().await;
    let client = client(&server).await;
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &resize_requests());
    server
        .store()
        .create(
            RESIZE,
            json!({"metadata": {"name": "r1", "namespace": "default"}, "spec": {}}),
        )
        .expect("created");
    let listed = api.list(&ListParams::default()).await.expect("listed");
    let rv = listed.metadata.resource_version.expect("a resourceVersion");
    let mut watch = api
        .watch(&WatchParams::default().timeout(60), &rv)
        .await
        .expect("watching")
        .boxed();

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.delete(RESIZE, &DeleteParams::default())
        .await
        .expect("the CRD is deleted");

    let first = tokio::time::timeout(std::time::Duration::from_secs(5), watch.next())
        .await
        .expect("an event in time");
    match first {
        Some(Ok(WatchEvent::Deleted(obj))) => {
            assert_eq!(obj.metadata.name.as_deref(), Some("r1"))
        }
        other => panic!("expected the object's deletion, got {other:?}"),
    }
    let end = tokio::time::timeout(std::time::Duration::from_secs(5), watch.next())
        .await
        .expect("the watch ends in time");
    assert!(end.is_none(), "the watch ends: {end:?}");
    let (code, _) = api_code(api.list(&ListParams::default()).await);
    assert_eq!(code, 404);
    let (code, _) = api_code(crds.get(RESIZE).await);
    assert_eq!(code, 404, "the CRD is gone");

    // Installed again: served, and empty.
    server.store().install_crd(RESIZE).expect("installed");
    let again = api.list(&ListParams::default()).await.expect("listed");
    assert!(again.items.is_empty());
}
