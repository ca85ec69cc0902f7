//! What `pods/status`, a CRD's `/status`, `pods/resize` and the main pod resource may change,
//! per resize API (`PodResizeApi`).

mod common;

use apiserver_double::{PodResizeApi, ServerConfig};
use common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::discovery::Discovery;
use serde_json::json;

async fn setup() -> (apiserver_double::ApiServer, Api<Pod>) {
    let server = server().await;
    let api = Api::namespaced(client(&server).await, "default");
    api.create(&PostParams::default(), &typed(pod("p", "node-1")))
        .await
        .unwrap();
    (server, api)
}

#[tokio::test]
async fn pod_status_changes_status_and_annotations_but_not_spec() {
    let (server, api) = setup().await;
    let patch = json!({
        "metadata": {"annotations": {"inplaced.io/observed": "1"}},
        "spec": {"nodeName": "elsewhere"},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    });
    let out = api
        .patch_status("p", &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .unwrap();
    assert_eq!(
        out.spec.unwrap().node_name.as_deref(),
        Some("node-1"),
        "spec ignored"
    );
    assert_eq!(out.status.unwrap().phase.as_deref(), Some("Running"));
    assert_eq!(
        out.metadata.annotations.unwrap()["inplaced.io/observed"],
        "1"
    );
    assert_eq!(
        out.metadata.generation,
        Some(1),
        "status writes keep generation"
    );

    // PUT on /status likewise; PUT on the main resource cannot change status.
    let mut cur = api.get("p").await.unwrap();
    cur.status.as_mut().unwrap().phase = Some("Succeeded".into());
    let main = api
        .replace("p", &PostParams::default(), &cur)
        .await
        .unwrap();
    assert_eq!(main.status.unwrap().phase.as_deref(), Some("Running"));
    let st = api.replace_status("p", &PostParams::default(), &cur).await;
    let st = st.unwrap();
    assert_eq!(st.status.unwrap().phase.as_deref(), Some("Succeeded"));
    let stored = server.store().get("pods", "default", "p").unwrap();
    assert_eq!(stored["spec"]["nodeName"], "node-1");
}

#[tokio::test]
async fn crd_status_changes_only_status() {
    let server = server().await;
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("inplaced.io", "v1alpha1", "ContainerResizeRequest"),
        "containerresizerequests",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(client(&server).await, "default", &ar);
    let obj: DynamicObject = typed(json!({
        "apiVersion": "inplaced.io/v1alpha1", "kind": "ContainerResizeRequest",
        "metadata": {"name": "r", "labels": {"node": "n1"}}, "spec": {"cpu": "200m"}
    }));
    api.create(&PostParams::default(), &obj).await.unwrap();
    let patch = json!({
        "metadata": {"labels": {"node": "other"}, "annotations": {"a": "b"}},
        "spec": {"cpu": "999"},
        "status": {"phase": "Done"}
    });
    let out = api
        .patch_status("r", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    assert_eq!(out.data["status"]["phase"], "Done");
    assert_eq!(out.data["spec"]["cpu"], "200m");
    assert_eq!(out.metadata.labels.unwrap()["node"], "n1");
    assert!(out.metadata.annotations.is_none());

    // Strategic merge patch is not for custom resources.
    let (code, _) = api_code(
        api.patch_status(
            "r",
            &PatchParams::default(),
            &Patch::Strategic(&json!({"status": {}})),
        )
        .await,
    );
    assert_eq!(code, 415);
    // The main resource ignores status.
    let main = api
        .patch(
            "r",
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"phase": "X"}})),
        )
        .await
        .unwrap();
    assert_eq!(main.data["status"]["phase"], "Done");
}

#[tokio::test]
async fn pod_resize_changes_only_container_resources() {
    let (_server, api) = setup().await;
    let patch = json!({"spec": {
        "nodeName": "elsewhere",
        "containers": [{"name": "app", "image": "other:2",
            "resources": {"requests": {"cpu": "150m", "memory": "64Mi"},
                          "limits": {"cpu": "300m", "memory": "128Mi"}}}]}});
    let out = api
        .patch_resize("p", &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .unwrap();
    let spec = out.spec.unwrap();
    assert_eq!(spec.node_name.as_deref(), Some("node-1"));
    let c = &spec.containers[0];
    assert_eq!(c.image.as_deref(), Some("busybox:1"));
    let res = c.resources.as_ref().unwrap();
    assert_eq!(res.requests.as_ref().unwrap()["cpu"].0, "150m");
    assert_eq!(res.limits.as_ref().unwrap()["cpu"].0, "300m");
    assert_eq!(
        out.metadata.generation,
        Some(2),
        "a resize is a spec change"
    );

    // The QoS class may not change through a resize.
    let to_guaranteed = json!({"spec": {"containers": [{"name": "app",
        "resources": {"requests": {"cpu": "300m", "memory": "128Mi"}}}]}});
    let (code, reason) = api_code(
        api.patch_resize(
            "p",
            &PatchParams::default(),
            &Patch::Strategic(&to_guaranteed),
        )
        .await,
    );
    assert_eq!((code, reason.as_str()), (422, "Invalid"));
    // Only cpu and memory are resizable.
    let storage = json!({"spec": {"containers": [{"name": "app",
        "resources": {"requests": {"ephemeral-storage": "1Gi"}}}]}});
    assert_eq!(
        api_code(
            api.patch_resize("p", &PatchParams::default(), &Patch::Strategic(&storage))
                .await
        )
        .0,
        422
    );
    // A container the pod does not have is not silently ignored.
    let unknown = json!({"spec": {"containers": [{"name": "sidecar",
        "resources": {"limits": {"cpu": "300m"}}}]}});
    assert_eq!(
        api_code(
            api.patch_resize("p", &PatchParams::default(), &Patch::Strategic(&unknown))
                .await
        ),
        (422, "Invalid".to_string())
    );
}

#[tokio::test]
async fn main_pod_resource_rejects_resource_changes_but_allows_image() {
    let (_server, api) = setup().await;
    let resources = json!({"spec": {"containers": [{"name": "app",
        "resources": {"requests": {"cpu": "150m"}}}]}});
    let (code, reason) = api_code(
        api.patch("p", &PatchParams::default(), &Patch::Strategic(&resources))
            .await,
    );
    assert_eq!((code, reason.as_str()), (422, "Invalid"));
    let image = json!({"spec": {"containers": [{"name": "app", "image": "busybox:2"}]}});
    let out = api
        .patch("p", &PatchParams::default(), &Patch::Strategic(&image))
        .await
        .unwrap();
    assert_eq!(
        out.spec.unwrap().containers[0].image.as_deref(),
        Some("busybox:2")
    );
    assert_eq!(out.metadata.generation, Some(2));
    // Unknown subresources are not found.
    let req = http::Request::get("/api/v1/namespaces/default/pods/p/bogus")
        .body(vec![])
        .unwrap();
    let r: Result<serde_json::Value, _> = api.clone().into_client().request(req).await;
    assert!(matches!(r, Err(kube::Error::Api(s)) if s.code == 404));
}

async fn setup_with(pod_resize: PodResizeApi) -> (apiserver_double::ApiServer, Api<Pod>) {
    let server = server_with(ServerConfig {
        pod_resize,
        ..Default::default()
    })
    .await;
    let api = Api::namespaced(client(&server).await, "default");
    api.create(&PostParams::default(), &typed(pod("p", "node-1")))
        .await
        .unwrap();
    (server, api)
}

fn resources_patch(requests_cpu: &str, limits_cpu: &str) -> serde_json::Value {
    json!({"spec": {"containers": [{"name": "app",
        "resources": {"requests": {"cpu": requests_cpu, "memory": "64Mi"},
                      "limits": {"cpu": limits_cpu, "memory": "128Mi"}}}]}})
}

/// The container status a kubelet writes for the running pod, with what it allocated.
async fn report_running(api: &Api<Pod>) {
    let status = json!({"status": {"containerStatuses": [{
        "name": "app", "ready": true, "restartCount": 0, "image": "busybox:1", "imageID": "",
        "allocatedResources": {"cpu": "100m", "memory": "64Mi"}}]}});
    api.patch_status("p", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

/// Whether discovery (legacy and aggregated) lists `pods/resize`.
async fn discovery_lists_pods_resize(server: &apiserver_double::ApiServer) -> [bool; 2] {
    let client = client(server).await;
    let mut out = [false; 2];
    for (i, discovery) in [
        Discovery::new(client.clone()).run().await.unwrap(),
        Discovery::new(client.clone())
            .run_aggregated()
            .await
            .unwrap(),
    ]
    .into_iter()
    .enumerate()
    {
        let (_, caps) = discovery
            .resolve_gvk(&GroupVersionKind::gvk("", "v1", "Pod"))
            .expect("pods");
        out[i] = caps
            .subresources
            .iter()
            .any(|(s, _)| s.plural == "pods/resize" || s.plural == "resize");
    }
    out
}

#[tokio::test]
async fn spec_update_cluster_resizes_through_the_pod_itself() {
    let (server, api) = setup_with(PodResizeApi::SpecUpdate).await;
    // 1.27–1.31: no subresource, as the real server answers an unknown one.
    let (code, _) = api_code(
        api.patch_resize(
            "p",
            &PatchParams::default(),
            &Patch::Strategic(&resources_patch("150m", "300m")),
        )
        .await,
    );
    assert_eq!(code, 404);
    assert_eq!(discovery_lists_pods_resize(&server).await, [false, false]);

    // Without a container status (nothing allocated yet) nothing is proposed.
    api.patch(
        "p",
        &PatchParams::default(),
        &Patch::Strategic(&resources_patch("120m", "300m")),
    )
    .await
    .unwrap();
    let stored = server.store().get("pods", "default", "p").unwrap();
    assert!(stored["status"].get("resize").is_none(), "{stored}");

    // A pod patch may change cpu/memory, and the server proposes the resize.
    report_running(&api).await;
    let out = api
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Strategic(&resources_patch("150m", "300m")),
        )
        .await
        .unwrap();
    let c = &out.spec.as_ref().unwrap().containers[0];
    let res = c.resources.as_ref().unwrap();
    assert_eq!(res.requests.as_ref().unwrap()["cpu"].0, "150m");
    assert_eq!(res.limits.as_ref().unwrap()["cpu"].0, "300m");
    assert_eq!(out.metadata.generation, Some(3), "two spec changes");
    let stored = server.store().get("pods", "default", "p").unwrap();
    assert_eq!(stored["status"]["resize"], "Proposed");

    // The same validation as pods/resize: the QoS class stays, only cpu and memory change.
    let to_guaranteed = json!({"spec": {"containers": [{"name": "app",
        "resources": {"requests": {"cpu": "300m", "memory": "128Mi"}}}]}});
    let (code, reason) = api_code(
        api.patch(
            "p",
            &PatchParams::default(),
            &Patch::Strategic(&to_guaranteed),
        )
        .await,
    );
    assert_eq!((code, reason.as_str()), (422, "Invalid"));
    let storage = json!({"spec": {"containers": [{"name": "app",
        "resources": {"requests": {"ephemeral-storage": "1Gi"}}}]}});
    assert_eq!(
        api_code(
            api.patch("p", &PatchParams::default(), &Patch::Strategic(&storage))
                .await
        )
        .0,
        422
    );
    // Everything else stays as immutable as in any pod update (resizePolicy included),
    // while an image change still passes.
    for forbidden in [
        json!({"spec": {"nodeName": "elsewhere"}}),
        json!({"spec": {"containers": [{"name": "app", "resizePolicy":
            [{"resourceName": "cpu", "restartPolicy": "RestartContainer"}]}]}}),
    ] {
        let (code, _) = api_code(
            api.patch("p", &PatchParams::default(), &Patch::Strategic(&forbidden))
                .await,
        );
        assert_eq!(code, 422, "{forbidden}");
    }
    let image = json!({"spec": {"containers": [{"name": "app", "image": "busybox:2"}]}});
    api.patch("p", &PatchParams::default(), &Patch::Strategic(&image))
        .await
        .unwrap();

    // Once the kubelet reports the new requests as allocated and clears the status, a
    // limits-only change is nothing for it to accept: no Proposed (MarkPodProposedForResize).
    server
        .store()
        .merge_patch(
            "pods",
            "default",
            "p",
            json!({"status": {"resize": null, "containerStatuses": [{"name": "app",
                "allocatedResources": {"cpu": "150m", "memory": "64Mi"}}]}}),
        )
        .unwrap();
    api.patch(
        "p",
        &PatchParams::default(),
        &Patch::Strategic(&resources_patch("150m", "400m")),
    )
    .await
    .unwrap();
    let stored = server.store().get("pods", "default", "p").unwrap();
    assert_eq!(
        stored["spec"]["containers"][0]["resources"]["limits"]["cpu"],
        "400m"
    );
    assert!(stored["status"].get("resize").is_none(), "{stored}");
}

#[tokio::test]
async fn resize_status_proposed_only_until_1_32() {
    let (server, api) = setup_with(PodResizeApi::SubresourceWithResizeStatus).await;
    assert_eq!(discovery_lists_pods_resize(&server).await, [true, true]);
    report_running(&api).await;
    api.patch_resize(
        "p",
        &PatchParams::default(),
        &Patch::Strategic(&resources_patch("150m", "300m")),
    )
    .await
    .unwrap();
    let stored = server.store().get("pods", "default", "p").unwrap();
    assert_eq!(stored["status"]["resize"], "Proposed");
    // 1.32 still forbids resources in a pod update.
    let (code, _) = api_code(
        api.patch(
            "p",
            &PatchParams::default(),
            &Patch::Strategic(&resources_patch("160m", "300m")),
        )
        .await,
    );
    assert_eq!(code, 422);

    // 1.33+ (the default): the kubelet's conditions tell, the server sets nothing.
    let (server, api) = setup_with(PodResizeApi::default()).await;
    api.patch_resize(
        "p",
        &PatchParams::default(),
        &Patch::Strategic(&resources_patch("150m", "300m")),
    )
    .await
    .unwrap();
    let stored = server.store().get("pods", "default", "p").unwrap();
    assert_eq!(
        stored["spec"]["containers"][0]["resources"]["limits"]["cpu"],
        "300m"
    );
    assert!(stored["status"].get("resize").is_none(), "{stored}");
}

#[tokio::test]
async fn resize_off_keeps_resources_immutable() {
    let (server, api) = setup_with(PodResizeApi::Off).await;
    let (code, _) = api_code(
        api.patch_resize(
            "p",
            &PatchParams::default(),
            &Patch::Strategic(&resources_patch("150m", "300m")),
        )
        .await,
    );
    assert_eq!(code, 404);
    let (code, reason) = api_code(
        api.patch(
            "p",
            &PatchParams::default(),
            &Patch::Strategic(&resources_patch("150m", "300m")),
        )
        .await,
    );
    assert_eq!((code, reason.as_str()), (422, "Invalid"));
    assert_eq!(discovery_lists_pods_resize(&server).await, [false, false]);
    let stored = server.store().get("pods", "default", "p").unwrap();
    assert_eq!(
        stored["spec"]["containers"][0]["resources"]["limits"]["cpu"],
        "200m"
    );
}

/// Without the gate the server drops what a kubelet reports of resizes from container
/// statuses, unless the pod's spec has a `resizePolicy`; with the gate it keeps them.
#[tokio::test]
async fn resize_status_fields_are_dropped_without_the_gate() {
    let status = json!({"status": {"containerStatuses": [{
        "name": "app", "ready": true, "restartCount": 0, "image": "busybox:1", "imageID": "",
        "allocatedResources": {"cpu": "100m"},
        "resources": {"limits": {"cpu": "200m"}}}]}});
    let kept = |stored: &serde_json::Value| {
        let reported = &stored["status"]["containerStatuses"][0];
        (
            reported.get("resources").is_some(),
            reported.get("allocatedResources").is_some(),
        )
    };
    for (api_kind, expected) in [
        (PodResizeApi::Off, (false, false)),
        (PodResizeApi::Subresource, (true, true)),
    ] {
        let (server, api) = setup_with(api_kind).await;
        api.patch_status("p", &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
        let stored = server.store().get("pods", "default", "p").unwrap();
        assert_eq!(kept(&stored), expected, "{api_kind:?}: {stored}");
        assert_eq!(stored["status"]["containerStatuses"][0]["ready"], true);
    }

    // A pod that uses the feature keeps them, gate or not.
    let (server, api) = setup_with(PodResizeApi::Off).await;
    let mut with_policy = pod("q", "node-1");
    with_policy["spec"]["containers"][0]["resizePolicy"] =
        json!([{"resourceName": "cpu", "restartPolicy": "NotRequired"}]);
    api.create(&PostParams::default(), &typed(with_policy))
        .await
        .unwrap();
    api.patch_status("q", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    let stored = server.store().get("pods", "default", "q").unwrap();
    assert_eq!(kept(&stored), (true, true), "{stored}");
}

#[test]
fn resize_api_by_release() {
    assert_eq!(PodResizeApi::for_release(26, true), PodResizeApi::Off);
    assert_eq!(
        PodResizeApi::for_release(27, true),
        PodResizeApi::SpecUpdate
    );
    assert_eq!(
        PodResizeApi::for_release(31, true),
        PodResizeApi::SpecUpdate
    );
    assert_eq!(PodResizeApi::for_release(30, false), PodResizeApi::Off);
    assert_eq!(
        PodResizeApi::for_release(32, true),
        PodResizeApi::SubresourceWithResizeStatus
    );
    assert_eq!(
        PodResizeApi::for_release(33, true),
        PodResizeApi::SubresourceKeepingMemoryLimits
    );
    assert_eq!(
        PodResizeApi::for_release(34, true),
        PodResizeApi::SubresourceAdmittingAnySize
    );
    assert_eq!(
        PodResizeApi::for_release(36, true),
        PodResizeApi::Subresource
    );
    assert_eq!(PodResizeApi::for_release(35, false), PodResizeApi::Off);
}

/// 1.33 refuses a memory limit decrease unless the container's memory resize policy restarts
/// it; 1.34 lets it through (the kubelet then decides, best effort).
#[tokio::test]
async fn a_memory_limit_decrease_is_refused_by_1_33_only() {
    let shrink = |memory: &str| {
        json!({"spec": {"containers": [{"name": "app",
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                          "limits": {"cpu": "200m", "memory": memory}}}]}})
    };
    let (server, api) = setup_with(PodResizeApi::for_release(33, true)).await;
    let (code, reason) = api_code(
        api.patch_resize(
            "p",
            &PatchParams::default(),
            &Patch::Strategic(&shrink("96Mi")),
        )
        .await,
    );
    assert_eq!((code, reason.as_str()), (422, "Invalid"));
    let stored = server.store().get("pods", "default", "p").unwrap();
    assert_eq!(
        stored["spec"]["containers"][0]["resources"]["limits"]["memory"],
        "128Mi"
    );
    // An increase, or a decrease of the request alone, is fine on 1.33.
    api.patch_resize(
        "p",
        &PatchParams::default(),
        &Patch::Strategic(&shrink("160Mi")),
    )
    .await
    .unwrap();

    // With RestartContainer for memory, 1.33 lets the decrease through.
    let mut restarting = pod("q", "node-1");
    restarting["spec"]["containers"][0]["resizePolicy"] =
        json!([{"resourceName": "memory", "restartPolicy": "RestartContainer"}]);
    api.create(&PostParams::default(), &typed(restarting))
        .await
        .unwrap();
    api.patch_resize(
        "q",
        &PatchParams::default(),
        &Patch::Strategic(&shrink("96Mi")),
    )
    .await
    .unwrap();

    let (_server, api) = setup_with(PodResizeApi::for_release(34, true)).await;
    api.patch_resize(
        "p",
        &PatchParams::default(),
        &Patch::Strategic(&shrink("96Mi")),
    )
    .await
    .unwrap();
}

/// From 1.32 `pods/resize` is refused for a pod whose first running container reports no
/// applied resources (a kubelet that does not resize in place); a pod without a running
/// container cannot tell and is let through.
#[tokio::test]
async fn resize_is_refused_where_the_kubelet_reports_no_applied_resources() {
    let (_server, api) = setup_with(PodResizeApi::Subresource).await;
    let running = |resources: serde_json::Value| {
        json!({"status": {"containerStatuses": [{
            "name": "app", "ready": true, "restartCount": 0, "image": "busybox:1", "imageID": "",
            "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
            "resources": resources}]}})
    };
    api.patch_resize(
        "p",
        &PatchParams::default(),
        &Patch::Strategic(&resources_patch("110m", "210m")),
    )
    .await
    .expect("no running container: let through");

    api.patch_status(
        "p",
        &PatchParams::default(),
        &Patch::Merge(&running(json!(null))),
    )
    .await
    .unwrap();
    let refused = api
        .patch_resize(
            "p",
            &PatchParams::default(),
            &Patch::Strategic(&resources_patch("120m", "220m")),
        )
        .await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(s))
            if s.code == 422 && s.message.contains("Pod running on node without support for resize")),
        "{refused:?}"
    );

    let applied = json!({"requests": {"cpu": "110m", "memory": "64Mi"},
                         "limits": {"cpu": "210m", "memory": "128Mi"}});
    api.patch_status(
        "p",
        &PatchParams::default(),
        &Patch::Merge(&running(applied)),
    )
    .await
    .unwrap();
    api.patch_resize(
        "p",
        &PatchParams::default(),
        &Patch::Strategic(&resources_patch("120m", "220m")),
    )
    .await
    .expect("a kubelet that reports what it applied resizes");
}
