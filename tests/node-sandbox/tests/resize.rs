//! In-place resize by the kubelet stand-in against the real containerd, per release: the cgroup
//! files and CRI `ContainerStatus.resources` change without a restart, and the pod status says
//! so as that kubelet does (1.27–1.32 `status.resize`, 1.33+ conditions). Expected values are
//! worked out by hand from `docs/kubelet-resize.md` (shares = milli*1024/1000, quota =
//! milli*100, pod cgroup = sums) and read from /sys/fs/cgroup directly.

mod common;

use std::time::{Duration, Instant};

use apiserver_double::{PodResizeApi, ServerConfig};
use common::*;
use inplaced::cri::labels;
use inplaced::cri::proto::LinuxContainerResources;
use kube::api::{Patch, PatchParams};
use node_sandbox::util::{test_cgroup_root, unique_name};
use serde_json::{Value, json};

const SLEEPER: &str = "trap 'exit 0' TERM; while true; do sleep 0.1; done";
const MI: i64 = 1 << 20;
const WAIT: Duration = Duration::from_secs(30);
/// Node allocatable cpu of every test node here: small enough to make resizes not fit.
const NODE_CPU_MILLIS: i64 = 2000;

fn resources(req_cpu: &str, req_mem: &str, lim_cpu: &str, lim_mem: &str) -> Value {
    json!({"requests": {"cpu": req_cpu, "memory": req_mem},
           "limits": {"cpu": lim_cpu, "memory": lim_mem}})
}

/// Two Burstable containers: app 100m/32Mi requests, 200m/64Mi limits; side 50m/16Mi requests,
/// 100m/32Mi limits.
fn pod_spec() -> Value {
    let container = |name: &str, res: Value| {
        json!({"name": name, "image": TEST_IMAGE, "command": ["/bin/sh", "-c", SLEEPER],
               "resources": res})
    };
    json!({"terminationGracePeriodSeconds": 5, "containers": [
        container("app", resources("100m", "32Mi", "200m", "64Mi")),
        container("side", resources("50m", "16Mi", "100m", "32Mi")),
    ]})
}

fn containers_patch(app: Value, side: Option<Value>) -> Value {
    let mut list = vec![json!({"name": "app", "resources": app})];
    if let Some(side) = side {
        list.push(json!({"name": "side", "resources": side}));
    }
    json!({"spec": {"containers": list}})
}

/// app grows (its cpu limit 200m → 400m is above the pod cgroup's current quota, so the pod
/// cgroup must grow first), side shrinks (its limits go down before the pod cgroup's).
fn grow_app_shrink_side() -> Value {
    containers_patch(
        resources("200m", "48Mi", "400m", "96Mi"),
        Some(resources("50m", "16Mi", "50m", "24Mi")),
    )
}

/// cpu.shares, cpu.cfs_quota_us and memory.limit_in_bytes of a cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Limits {
    shares: i64,
    quota: i64,
    memory: i64,
}

const BEFORE_APP: Limits = Limits {
    shares: 102,
    quota: 20_000,
    memory: 64 * MI,
};
const BEFORE_SIDE: Limits = Limits {
    shares: 51,
    quota: 10_000,
    memory: 32 * MI,
};
const BEFORE_POD: Limits = Limits {
    shares: 153,
    quota: 30_000,
    memory: 96 * MI,
};
const AFTER_APP: Limits = Limits {
    shares: 204,
    quota: 40_000,
    memory: 96 * MI,
};
const AFTER_SIDE: Limits = Limits {
    shares: 51,
    quota: 5_000,
    memory: 24 * MI,
};
const AFTER_POD: Limits = Limits {
    shares: 256,
    quota: 45_000,
    memory: 120 * MI,
};

fn read_number(path: &str) -> i64 {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.trim().parse().unwrap()
}

/// The pod cgroup (`sub` empty) or a container's below it, as the kernel reports it.
fn cgroup(uid: &str, sub: &str) -> Limits {
    let dir = format!("{}/kubepods/burstable/pod{uid}/{sub}", test_cgroup_root());
    let file = |controller: &str, name: &str| {
        read_number(&format!("/sys/fs/cgroup/{controller}/{dir}/{name}"))
    };
    Limits {
        shares: file("cpu", "cpu.shares"),
        quota: file("cpu", "cpu.cfs_quota_us"),
        memory: file("memory", "memory.limit_in_bytes"),
    }
}

async fn cri_resources(id: &str) -> LinuxContainerResources {
    cri()
        .container_status(id, false)
        .await
        .unwrap()
        .status
        .unwrap()
        .resources
        .unwrap()
        .linux
        .unwrap()
}

async fn cri_limits(id: &str) -> Limits {
    let r = cri_resources(id).await;
    Limits {
        shares: r.cpu_shares,
        quota: r.cpu_quota,
        memory: r.memory_limit_in_bytes,
    }
}

struct Running {
    name: String,
    uid: String,
    app: String,
    side: String,
}

fn container_id(pod: &Value, name: &str) -> String {
    status_of(pod, name)["containerID"]
        .as_str()
        .and_then(|s| s.strip_prefix("containerd://"))
        .unwrap_or_else(|| panic!("no container ID for {name}: {pod}"))
        .to_owned()
}

async fn start_pod(env: &Env) -> Running {
    let name = unique_name("resize");
    let created = env.create_pod(&name, pod_spec());
    let pod = env.wait_pod(&name, WAIT, all_running).await;
    let running = Running {
        uid: created["metadata"]["uid"].as_str().unwrap().to_owned(),
        app: container_id(&pod, "app"),
        side: container_id(&pod, "side"),
        name,
    };
    assert_eq!(cgroup(&running.uid, ""), BEFORE_POD);
    assert_eq!(cgroup(&running.uid, &running.app), BEFORE_APP);
    assert_eq!(cgroup(&running.uid, &running.side), BEFORE_SIDE);
    running
}

async fn env_for(version: &str, api: PodResizeApi, gate: bool) -> Env {
    Env::start_on(
        ServerConfig {
            pod_resize: api,
            ..Default::default()
        },
        |c| {
            c.kubelet_version = version.into();
            c.resize_gate = gate;
            c.restart_delay = Duration::from_millis(500);
            c.allocatable_cpu_millis = Some(NODE_CPU_MILLIS);
            c.allocatable_memory_bytes = Some(4 << 30);
        },
    )
    .await
}

/// Resizes through `pods/resize`; the pod as the server answered.
async fn patch_resize(env: &Env, name: &str, patch: &Value) -> Value {
    let answer = env
        .pods_api()
        .await
        .patch_resize(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .unwrap();
    serde_json::to_value(answer).unwrap()
}

fn condition<'a>(pod: &'a Value, kind: &str) -> Option<&'a Value> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

fn no_resize_conditions(pod: &Value) -> bool {
    condition(pod, "PodResizePending").is_none() && condition(pod, "PodResizeInProgress").is_none()
}

/// Both containers report the grown/shrunk resources (read back from the runtime).
fn reports_resized(pod: &Value) -> bool {
    status_of(pod, "app")["resources"] == resources("200m", "48Mi", "400m", "96Mi")
        && status_of(pod, "side")["resources"] == resources("50m", "16Mi", "50m", "24Mi")
}

/// Same containers as at the start: a resize is no restart.
fn not_restarted(pod: &Value, running: &Running) {
    assert_eq!(container_id(pod, "app"), running.app);
    assert_eq!(container_id(pod, "side"), running.side);
    assert_eq!(status_of(pod, "app")["restartCount"], 0);
    assert_eq!(status_of(pod, "side")["restartCount"], 0);
}

/// The cgroups and the runtime after [`grow_app_shrink_side`].
async fn assert_resized(running: &Running) {
    assert_eq!(cgroup(&running.uid, ""), AFTER_POD);
    assert_eq!(cgroup(&running.uid, &running.app), AFTER_APP);
    assert_eq!(cgroup(&running.uid, &running.side), AFTER_SIDE);
    assert_eq!(cri_limits(&running.app).await, AFTER_APP);
    assert_eq!(cri_limits(&running.side).await, AFTER_SIDE);
}

/// Changes a container's memory limit through CRI alone, as something behind kubelet's back.
async fn set_memory_behind_kubelet(id: &str, bytes: i64) {
    let mut r = cri_resources(id).await;
    r.memory_limit_in_bytes = bytes;
    cri().update_container_resources(id, r).await.unwrap();
}

async fn wait_cgroup(uid: &str, id: &str, want: Limits) {
    wait_until(WAIT, &format!("cgroup of {id} to be {want:?}"), || async {
        cgroup(uid, id) == want
    })
    .await;
}

#[tokio::test]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn kubelet_1_32_resizes_through_pods_resize_and_reports_status_resize() {
    let env = env_for("v1.32.4", PodResizeApi::SubresourceWithResizeStatus, true).await;
    let running = start_pod(&env).await;
    let name = running.name.as_str();

    patch_resize(&env, name, &grow_app_shrink_side()).await;
    let pod = env
        .wait_pod(name, WAIT, |p| {
            reports_resized(p) && p["status"].get("resize").is_none()
        })
        .await;
    not_restarted(&pod, &running);
    assert_resized(&running).await;
    // 1.32 does not report allocatedResources (its own alpha gate, off), nor conditions.
    assert!(status_of(&pod, "app").get("allocatedResources").is_none());
    assert!(no_resize_conditions(&pod));
    let allocated = env.kubelet().allocated_resources(&running.uid).unwrap();
    assert_eq!(allocated["app"], resources("200m", "48Mi", "400m", "96Mi"));

    // Beyond the node's allocatable cpu (3000m + side's 50m > 2000m): Infeasible, nothing changes.
    patch_resize(
        &env,
        name,
        &containers_patch(resources("3", "48Mi", "3", "96Mi"), None),
    )
    .await;
    let pod = env
        .wait_pod(name, WAIT, |p| p["status"]["resize"] == "Infeasible")
        .await;
    assert!(reports_resized(&pod));
    assert_resized(&running).await;
    // Another infeasible size: the server proposes it, the kubelet answers Infeasible again
    // (its status write is the same as before, yet the API no longer shows it).
    let answer = patch_resize(
        &env,
        name,
        &containers_patch(resources("4", "48Mi", "4", "96Mi"), None),
    )
    .await;
    assert_eq!(answer["status"]["resize"], "Proposed");
    env.wait_pod(name, WAIT, |p| p["status"]["resize"] == "Infeasible")
        .await;

    // Back to what is allocated: nothing left to resize, the status clears.
    patch_resize(
        &env,
        name,
        &containers_patch(resources("200m", "48Mi", "400m", "96Mi"), None),
    )
    .await;
    env.wait_pod(name, WAIT, |p| p["status"].get("resize").is_none())
        .await;

    // Up to 1.32 kubelet compares with what the runtime reports: a change made behind its back
    // is undone at a later sync.
    set_memory_behind_kubelet(&running.app, 80 * MI).await;
    wait_cgroup(&running.uid, &running.app, AFTER_APP).await;
    let pod = env.pod(name).unwrap();
    not_restarted(&pod, &running);
    env.stop().await;
}

#[tokio::test]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn kubelet_1_33_reports_resizes_in_conditions() {
    // Under a 1.35 server: a 1.36 one refuses the infeasible resize below itself (403).
    let env = env_for("v1.33.5", PodResizeApi::SubresourceAdmittingAnySize, true).await;
    // The Node shows the allocatable the resize decisions below are made against.
    let node = env.server.store().get("nodes", "", &env.node).unwrap();
    assert_eq!(
        node["status"]["allocatable"],
        json!({"cpu": "2", "memory": "4Gi", "pods": "110"})
    );
    for key in ["cpu", "memory"] {
        assert!(node["status"]["capacity"][key].is_string(), "{node}");
    }
    let running = start_pod(&env).await;
    let name = running.name.as_str();

    patch_resize(&env, name, &grow_app_shrink_side()).await;
    let pod = env
        .wait_pod(name, WAIT, |p| {
            reports_resized(p) && no_resize_conditions(p)
        })
        .await;
    not_restarted(&pod, &running);
    assert_resized(&running).await;
    assert!(pod["status"].get("resize").is_none());
    assert_eq!(
        status_of(&pod, "app")["allocatedResources"],
        json!({"cpu": "200m", "memory": "48Mi"})
    );

    // Infeasible: the pod's requests (3000m + 50m) exceed the node's allocatable.
    patch_resize(
        &env,
        name,
        &containers_patch(resources("3", "48Mi", "3", "96Mi"), None),
    )
    .await;
    let pod = env
        .wait_pod(name, WAIT, |p| condition(p, "PodResizePending").is_some())
        .await;
    let pending = condition(&pod, "PodResizePending").unwrap();
    assert_eq!(pending["status"], "True");
    assert_eq!(pending["reason"], "Infeasible");
    assert_eq!(
        pending["message"],
        "Node didn't have enough capacity: cpu, requested: 3050, capacity: 2000"
    );
    assert_resized(&running).await;

    // Deferred: it fits the node, but not next to another pod's 1500m; retried until it fits.
    let filler = unique_name("filler");
    env.create_pod(
        &filler,
        json!({"terminationGracePeriodSeconds": 2, "containers": [{
            "name": "main", "image": TEST_IMAGE, "command": ["/bin/sh", "-c", SLEEPER],
            "resources": {"requests": {"cpu": "1500m"}}}]}),
    );
    env.wait_pod(&filler, WAIT, all_running).await;
    patch_resize(
        &env,
        name,
        &containers_patch(resources("500m", "48Mi", "1", "96Mi"), None),
    )
    .await;
    let pod = env
        .wait_pod(name, WAIT, |p| {
            condition(p, "PodResizePending").is_some_and(|c| c["reason"] == "Deferred")
        })
        .await;
    assert_eq!(
        condition(&pod, "PodResizePending").unwrap()["message"],
        "Node didn't have enough resource: cpu, requested: 550, used: 1500, capacity: 2000"
    );
    assert_resized(&running).await;
    env.server.store().delete("pods", NS, &filler).unwrap();
    let pod = env
        .wait_pod(name, WAIT, |p| {
            no_resize_conditions(p)
                && status_of(p, "app")["resources"] == resources("500m", "48Mi", "1", "96Mi")
        })
        .await;
    not_restarted(&pod, &running);
    let app = Limits {
        shares: 512,
        quota: 100_000,
        memory: 96 * MI,
    };
    assert_eq!(cgroup(&running.uid, &running.app), app);
    // Pod: requests 550m → 563 shares; limits 1000m + 50m; memory 96Mi + 24Mi.
    assert_eq!(
        cgroup(&running.uid, ""),
        Limits {
            shares: 563,
            quota: 105_000,
            memory: 120 * MI,
        }
    );

    // From 1.33 kubelet compares with what it sent: a change behind its back stays...
    set_memory_behind_kubelet(&running.app, 80 * MI).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(cgroup(&running.uid, &running.app).memory, 80 * MI);
    // ...until its next resize of the pod.
    patch_resize(
        &env,
        name,
        &containers_patch(resources("500m", "48Mi", "1", "112Mi"), None),
    )
    .await;
    wait_cgroup(
        &running.uid,
        &running.app,
        Limits {
            memory: 112 * MI,
            ..app
        },
    )
    .await;

    // A memory limit is never lowered to at or below what the container uses: 40Mi in its
    // /dev/shm, limit asked 32Mi. The resize stays in progress with the error.
    let fill = "dd if=/dev/zero of=/dev/shm/fill bs=1048576 count=40";
    let out = cri()
        .exec_sync(
            &running.app,
            vec!["/bin/sh".into(), "-c".into(), fill.into()],
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    assert_eq!(out.exit_code, 0, "{}", String::from_utf8_lossy(&out.stderr));
    patch_resize(
        &env,
        name,
        &containers_patch(resources("500m", "16Mi", "1", "32Mi"), None),
    )
    .await;
    let pod = env
        .wait_pod(name, WAIT, |p| {
            condition(p, "PodResizeInProgress").is_some_and(|c| c["reason"] == "Error")
        })
        .await;
    let message = condition(&pod, "PodResizeInProgress").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(message.contains("usage"), "{message}");
    assert_eq!(cgroup(&running.uid, &running.app).memory, 112 * MI);
    // Freed, the retry goes through.
    cri()
        .exec_sync(
            &running.app,
            vec!["rm".into(), "/dev/shm/fill".into()],
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    let pod = env.wait_pod(name, WAIT, no_resize_conditions).await;
    assert_eq!(cgroup(&running.uid, &running.app).memory, 32 * MI);
    not_restarted(&pod, &running);
    env.stop().await;
}

#[tokio::test]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn kubelet_1_30_resizes_after_a_pod_spec_update() {
    let env = env_for("v1.30.7", PodResizeApi::SpecUpdate, true).await;
    let running = start_pod(&env).await;
    let name = running.name.as_str();
    let annotations_before = env
        .kubelet()
        .runtime_containers(&running.uid)
        .await
        .unwrap();

    env.pods_api()
        .await
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Strategic(&grow_app_shrink_side()),
        )
        .await
        .unwrap();
    let pod = env
        .wait_pod(name, WAIT, |p| {
            reports_resized(p) && p["status"].get("resize").is_none()
        })
        .await;
    not_restarted(&pod, &running);
    assert_resized(&running).await;
    assert_eq!(
        status_of(&pod, "side")["allocatedResources"],
        json!({"cpu": "50m", "memory": "16Mi"})
    );
    // The containers kept the hashes kubelet stored at their creation.
    let after = env
        .kubelet()
        .runtime_containers(&running.uid)
        .await
        .unwrap();
    for c in &after {
        let before = annotations_before.iter().find(|b| b.id == c.id).unwrap();
        for key in [
            labels::CONTAINER_HASH,
            labels::CONTAINER_HASH_WITHOUT_RESOURCES,
        ] {
            assert_eq!(c.annotations.get(key), before.annotations.get(key), "{key}");
        }
    }
    env.stop().await;
}

#[tokio::test]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn kubelet_without_resize_leaves_containers_alone_and_recreates_from_the_spec() {
    // A kubelet with the gate off under an API server that takes resizes in the pod spec (a
    // 1.31 API server with the gate on): the spec changes, the kubelet does not follow, and a
    // 1.31 kubelet, whose hash leaves resources out, does not restart the container either.
    // (From 1.32 the API server refuses `pods/resize` for a pod whose running containers
    // report no applied resources, so the spec cannot change under such a kubelet.)
    let env = env_for("v1.31.12", PodResizeApi::SpecUpdate, false).await;
    assert!(!env.kubelet().resizes_in_place());
    let running = start_pod(&env).await;
    let name = running.name.as_str();

    // Smaller resources, so a container recreated from them fits the unchanged pod cgroup.
    env.pods_api()
        .await
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Strategic(&containers_patch(
                resources("100m", "32Mi", "150m", "48Mi"),
                None,
            )),
        )
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        assert_eq!(cgroup(&running.uid, &running.app), BEFORE_APP);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let pod = env.pod(name).unwrap();
    not_restarted(&pod, &running);
    assert!(no_resize_conditions(&pod));
    assert!(status_of(&pod, "app").get("allocatedResources").is_none());
    assert!(status_of(&pod, "app").get("resources").is_none());
    assert_eq!(cgroup(&running.uid, ""), BEFORE_POD);

    // A resize through CRI alone (what inplaced's cri actuator does) is left as it is.
    set_memory_behind_kubelet(&running.app, 56 * MI).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(cgroup(&running.uid, &running.app).memory, 56 * MI);

    // A container the kubelet recreates gets the pod spec's resources.
    cri()
        .stop_container(&running.app, Duration::from_secs(5))
        .await
        .unwrap();
    let pod = env
        .wait_pod(name, WAIT, |p| {
            let s = status_of(p, "app");
            s["restartCount"] == 1 && s["state"]["running"].is_object()
        })
        .await;
    let restarted = container_id(&pod, "app");
    assert_ne!(restarted, running.app);
    assert_eq!(
        cgroup(&running.uid, &restarted),
        Limits {
            shares: 102,
            quota: 15_000,
            memory: 48 * MI,
        }
    );
    env.stop().await;
}
