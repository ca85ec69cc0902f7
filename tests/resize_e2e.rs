//! ContainerResizeRequests end to end: the agent against the kubelet stand-in, the API double and
//! real containerd + runc (cgroup v1 here). Expected cgroup values are worked out by hand from
//! `docs/kubelet-resize.md` (shares = milli*1024/1000, quota = milli*100 with the
//! 100 ms period, the pod cgroup holds the sums) and read from /sys/fs/cgroup directly; the CRI
//! proxy in front of the agent counts every UpdateContainerResources it sends.

mod support;

use std::process::Command;
use std::time::Duration;

use node_sandbox::{Fault, FaultRule};
use serde_json::{Value, json};
use support::sandbox::{NS, Node, NodeOptions, container_id, container_status};
use support::{cgroup_root, unique};
use tonic::Code;

const WAIT: Duration = Duration::from_secs(60);
const MI: i64 = 1 << 20;
const POLITE: &str = "trap 'exit 0' TERM; while true; do sleep 0.1; done";

fn resources(req_cpu: &str, req_mem: &str, lim_cpu: &str, lim_mem: &str) -> Value {
    json!({"requests": {"cpu": req_cpu, "memory": req_mem},
           "limits": {"cpu": lim_cpu, "memory": lim_mem}})
}

fn busybox(name: &str, script: &str, resources: Value) -> Value {
    json!({"name": name, "image": "localhost/busybox:local",
           "command": ["/bin/sh", "-c", script], "resources": resources})
}

/// Two Burstable containers: app 100m/32Mi requests, 200m/64Mi limits; side 50m/16Mi requests,
/// 100m/32Mi limits.
fn two_containers() -> Value {
    json!({"containers": [
        busybox("app", POLITE, resources("100m", "32Mi", "200m", "64Mi")),
        busybox("side", POLITE, resources("50m", "16Mi", "100m", "32Mi")),
    ]})
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
/// app 200m/48Mi requests, 400m/96Mi limits.
const GROWN_APP: Limits = Limits {
    shares: 204,
    quota: 40_000,
    memory: 96 * MI,
};
/// side 50m/16Mi requests, 50m/24Mi limits.
const SHRUNK_SIDE: Limits = Limits {
    shares: 51,
    quota: 5_000,
    memory: 24 * MI,
};
/// 250m requested, 450m and 120Mi limits in all.
const RESIZED_POD: Limits = Limits {
    shares: 256,
    quota: 45_000,
    memory: 120 * MI,
};

fn read_number(path: &str) -> i64 {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("{path}: {text:?}: {e}"))
}

/// Whether this machine runs cgroup v2 alone (the VM of tests/vm) rather than v1.
fn cgroup_v2() -> bool {
    std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists()
}

/// The pod cgroup (`container` None) or a container's below it, relative to a controller's
/// root: cgroupfs `<root>/kubepods/burstable/pod<uid>/<id>`, or with the systemd driver the pod
/// slice and the container's scope as kubelet and containerd name them.
fn cgroup_dir(pod: &Value, container: Option<&str>) -> String {
    let uid = pod["metadata"]["uid"].as_str().unwrap();
    let mut dir = if node_sandbox::util::test_cgroup_driver_is_systemd() {
        format!(
            "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice",
            uid.replace('-', "_")
        )
    } else {
        format!("{}/kubepods/burstable/pod{uid}", cgroup_root())
    };
    if let Some(name) = container {
        let id = container_id(pod, name);
        if node_sandbox::util::test_cgroup_driver_is_systemd() {
            dir = format!("{dir}/cri-containerd-{id}.scope");
        } else {
            dir = format!("{dir}/{id}");
        }
    }
    dir
}

/// The pod cgroup (`container` None) or a container's below it, as the kernel reports it: on
/// v2 `shares` is cpu.weight, compare with [`held`].
fn cgroup(pod: &Value, container: Option<&str>) -> Limits {
    let dir = cgroup_dir(pod, container);
    if cgroup_v2() {
        let file = |name: &str| {
            let path = format!("/sys/fs/cgroup/{dir}/{name}");
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
        };
        let max = file("cpu.max");
        let quota = max.split_whitespace().next().unwrap_or_default();
        let number = |text: &str| {
            if text.trim() == "max" {
                -1
            } else {
                text.trim()
                    .parse()
                    .unwrap_or_else(|e| panic!("{dir}: {text:?}: {e}"))
            }
        };
        return Limits {
            shares: number(&file("cpu.weight")),
            quota: number(quota),
            memory: number(&file("memory.max")),
        };
    }
    let file = |controller: &str, name: &str| {
        read_number(&format!("/sys/fs/cgroup/{controller}/{dir}/{name}"))
    };
    Limits {
        shares: file("cpu", "cpu.shares"),
        quota: file("cpu", "cpu.cfs_quota_us"),
        memory: file("memory", "memory.limit_in_bytes"),
    }
}

/// `limits` as the kernel holds them here: on cgroup v2 the shares become the cpu.weight runc
/// writes for them (`1 + (shares - 2) * 9999 / 262142`, runc's ConvertCPUSharesToCgroupV2Value).
fn held(limits: Limits) -> Limits {
    if cgroup_v2() {
        Limits {
            shares: 1 + (limits.shares - 2) * 9999 / 262_142,
            ..limits
        }
    } else {
        limits
    }
}

/// memory.swap.max of a cgroup on v2, as written (`max` or bytes).
fn swap_max(pod: &Value, container: Option<&str>) -> String {
    let path = format!(
        "/sys/fs/cgroup/{}/memory.swap.max",
        cgroup_dir(pod, container)
    );
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .trim()
        .to_owned()
}

async fn create_resize(node: &Node, pod: &str, containers: Value) -> String {
    node.create_resize(json!({"podName": pod, "containers": containers}))
        .await
}

async fn wait_resize(node: &Node, name: &str, pred: impl Fn(&Value) -> bool) -> Value {
    node.wait_resize(name, WAIT, pred).await
}

fn phase_is(phase: &'static str) -> impl Fn(&Value) -> bool {
    move |r| r.pointer("/status/phase") == Some(&json!(phase))
}

async fn wait_final(node: &Node, name: &str) -> Value {
    node.wait_resize_final(name, WAIT).await
}

fn result_of<'a>(request: &'a Value, container: &str) -> &'a Value {
    request
        .pointer("/status/containers")
        .and_then(Value::as_array)
        .and_then(|a| a.iter().find(|c| c["name"] == container))
        .unwrap_or(&Value::Null)
}

fn message(request: &Value) -> &str {
    request
        .pointer("/status/message")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// `name{labels} value` of the agent's /metrics, 0 when absent.
fn metric(node: &mut Node, series: &str) -> f64 {
    let (_, text) = node.agent().get("/metrics").unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// The agent's writes of a request's status, from the API server's audit log.
fn status_writes(node: &Node, name: &str) -> usize {
    node.server
        .audit()
        .entries()
        .iter()
        .filter(|e| {
            e.request.resource == "containerresizerequests"
                && e.request.subresource == "status"
                && e.request.name == name
                && e.request.verb == "patch"
        })
        .count()
}

async fn cri_linux(id: &str) -> (i64, i64, i64) {
    let status = support::client().container_status(id, false).await.unwrap();
    let linux = status
        .status
        .and_then(|s| s.resources)
        .and_then(|r| r.linux)
        .unwrap();
    (
        linux.cpu_shares,
        linux.cpu_quota,
        linux.memory_limit_in_bytes,
    )
}

/// kubelet 1.31 with the resize gate off (its default): `auto` picks the `cri` actuator. Both
/// containers change in one request (app grows, side shrinks), then a second request puts them
/// back; the pod cgroup follows, nothing restarts, the API's pod spec is left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn cri_actuator_grows_and_shrinks_a_two_container_pod() {
    let mut node = Node::start_with(NodeOptions::kubelet("v1.31.12")).await;
    let pod_name = unique("resize-two");
    let pod = node.run_pod(&pod_name, two_containers()).await;
    let (app_id, side_id) = (container_id(&pod, "app"), container_id(&pod, "side"));
    assert_eq!(cgroup(&pod, None), held(BEFORE_POD));
    assert_eq!(cgroup(&pod, Some("app")), held(BEFORE_APP));
    assert_eq!(cgroup(&pod, Some("side")), held(BEFORE_SIDE));

    let name = create_resize(
        &node,
        &pod_name,
        json!([
            {"name": "app", "resources": resources("200m", "48Mi", "400m", "96Mi")},
            {"name": "side", "resources": {"limits": {"cpu": "50m", "memory": "24Mi"}}},
        ]),
    )
    .await;
    let done = wait_final(&node, &name).await;
    assert_eq!(done["status"]["phase"], "Succeeded", "{done:#}");
    assert_eq!(done["status"]["actuator"], "cri", "{done:#}");
    assert!(done.pointer("/status/completionTime").is_some(), "{done:#}");
    // Read back from the runtime: shares 204 -> ceil(204*1000/1024) = 200m.
    assert_eq!(
        result_of(&done, "app")["resources"],
        resources("200m", "48Mi", "400m", "96Mi"),
        "{done:#}"
    );
    assert_eq!(
        result_of(&done, "side")["resources"],
        resources("50m", "16Mi", "50m", "24Mi"),
        "{done:#}"
    );
    assert_eq!(result_of(&done, "app")["containerID"], json!(app_id));
    assert_eq!(cgroup(&pod, None), held(RESIZED_POD));
    assert_eq!(cgroup(&pod, Some("app")), held(GROWN_APP));
    assert_eq!(cgroup(&pod, Some("side")), held(SHRUNK_SIDE));
    if cgroup_v2() {
        // No swap for the containers (containerd passes swap = limit, runc writes 0); kubelet
        // never sets one for the pod cgroup, and neither does the agent.
        assert_eq!(swap_max(&pod, Some("app")), "0");
        assert_eq!(swap_max(&pod, Some("side")), "0");
        assert_eq!(swap_max(&pod, None), "max");
    }
    assert_eq!(cri_linux(&app_id).await, (204, 40_000, 96 * MI));
    assert_eq!(cri_linux(&side_id).await, (51, 5_000, 24 * MI));
    // Memory and cpu of both containers: four updates, no restart, no change in the API.
    assert_eq!(node.proxy.calls("UpdateContainerResources"), 4);
    let now = node.pod(&pod_name).unwrap();
    assert_eq!(container_id(&now, "app"), app_id);
    assert_eq!(container_status(&now, "app")["restartCount"], 0);
    assert_eq!(
        now["spec"]["containers"][0]["resources"],
        resources("100m", "32Mi", "200m", "64Mi")
    );
    // Events go out beside the status write: wait for it, then there is exactly one.
    node.wait_event(&pod_name, "Resized", WAIT).await;
    // Once final, the status is not written again (the watch has shown it back).
    let writes = status_writes(&node, &name);
    assert!((2..=3).contains(&writes), "{writes} status writes");
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(status_writes(&node, &name), writes);
    assert_eq!(node.events(&pod_name, "Resized").len(), 1);

    let back = create_resize(
        &node,
        &pod_name,
        json!([
            {"name": "app", "resources": resources("100m", "32Mi", "200m", "64Mi")},
            {"name": "side", "resources": {"limits": {"cpu": "100m", "memory": "32Mi"}}},
        ]),
    )
    .await;
    let done = wait_final(&node, &back).await;
    assert_eq!(done["status"]["phase"], "Succeeded", "{done:#}");
    assert_eq!(cgroup(&pod, None), held(BEFORE_POD));
    assert_eq!(cgroup(&pod, Some("app")), held(BEFORE_APP));
    assert_eq!(cgroup(&pod, Some("side")), held(BEFORE_SIDE));
    assert_eq!(
        metric(
            &mut node,
            "inplaced_resizes_total{actuator=\"cri\",result=\"Succeeded\"}"
        ),
        2.0
    );
    assert_eq!(
        metric(
            &mut node,
            "inplaced_resize_duration_seconds_count{actuator=\"cri\",result=\"Succeeded\"}"
        ),
        2.0
    );
    node.stop().await;
}

/// A memory limit that is not a whole number of pages (100M = 100,000,000 bytes) is kept by
/// the kernel rounded down to pages: 24,414 pages of 4 KiB = 99,999,744 bytes, in the
/// container's cgroup and in the pod's (one container). The runtime reports the limit as asked.
/// The resize succeeds: the rounding is the kernel's, not a failed write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn cri_resize_to_a_limit_in_decimal_bytes_succeeds() {
    let node = Node::start_with(NodeOptions::kubelet("v1.31.12")).await;
    let pod_name = unique("resize-decimal");
    let pod = node
        .run_pod(
            &pod_name,
            json!({"containers": [busybox("app", POLITE, resources("100m", "32Mi", "200m", "64Mi"))]}),
        )
        .await;
    let app_id = container_id(&pod, "app");
    let name = create_resize(
        &node,
        &pod_name,
        json!([{"name": "app", "resources": resources("100m", "32Mi", "200m", "100M")}]),
    )
    .await;
    let done = wait_final(&node, &name).await;
    assert_eq!(done["status"]["phase"], "Succeeded", "{done:#}");
    assert_eq!(cgroup(&pod, Some("app")).memory, 99_999_744);
    assert_eq!(cgroup(&pod, None).memory, 99_999_744);
    assert_eq!(cri_linux(&app_id).await.2, 100_000_000);
    node.stop().await;
}

/// A sidecar (an init container with `restartPolicy: Always`) runs beside the app, so the pod
/// cgroup holds its share too, before and after a resize of the app: side 50m/16Mi requests,
/// 100m/32Mi limits; app 100m/32Mi, 200m/64Mi, grown to 200m/48Mi, 400m/96Mi. Pod cgroup
/// before: 150m → 153 shares, 300m → quota 30000, 96Mi; after: 250m → 256 shares, 500m →
/// quota 50000, 128Mi.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn cri_resize_counts_a_sidecar_in_the_pod_cgroup() {
    let node = Node::start_with(NodeOptions::kubelet("v1.31.12")).await;
    let pod_name = unique("resize-sidecar");
    let mut side = busybox("side", POLITE, resources("50m", "16Mi", "100m", "32Mi"));
    side["restartPolicy"] = json!("Always");
    let pod = node
        .run_pod(
            &pod_name,
            json!({"initContainers": [side],
                   "containers": [busybox("app", POLITE, resources("100m", "32Mi", "200m", "64Mi"))]}),
        )
        .await;
    let before = Limits {
        shares: 153,
        quota: 30_000,
        memory: 96 * MI,
    };
    assert_eq!(cgroup(&pod, None), held(before));
    let name = create_resize(
        &node,
        &pod_name,
        json!([{"name": "app", "resources": resources("200m", "48Mi", "400m", "96Mi")}]),
    )
    .await;
    let done = wait_final(&node, &name).await;
    assert_eq!(done["status"]["phase"], "Succeeded", "{done:#}");
    assert_eq!(cgroup(&pod, Some("app")), held(GROWN_APP));
    assert_eq!(
        cgroup(&pod, None),
        held(Limits {
            shares: 256,
            quota: 50_000,
            memory: 128 * MI,
        })
    );
    node.stop().await;
}

/// Every refusal ends its request with a clear status and changes nothing: no
/// UpdateContainerResources reaches the runtime and the cgroup files keep their values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn refusals_change_nothing() {
    let mut node = Node::start_with(NodeOptions::kubelet("v1.31.12")).await;
    // 40 MiB in /dev/shm (a tmpfs: charged to the container's memory cgroup, not reclaimable).
    let filler = "dd if=/dev/zero of=/dev/shm/fill bs=1048576 count=40 2>/dev/null; \
                  trap 'exit 0' TERM; while true; do sleep 0.1; done";
    let pod_name = unique("refused");
    let pod = node
        .run_pod(
            &pod_name,
            json!({"containers": [busybox("app", filler, resources("100m", "32Mi", "200m", "64Mi"))]}),
        )
        .await;
    let requests_only = unique("requests-only");
    node.run_pod(
        &requests_only,
        json!({"containers": [busybox("app", POLITE, json!({"requests": {"cpu": "50m", "memory": "16Mi"}}))]}),
    )
    .await;
    let restarts_to_resize = unique("restart-policy");
    let mut app = busybox("app", POLITE, resources("100m", "32Mi", "200m", "64Mi"));
    app["resizePolicy"] = json!([{"resourceName": "memory", "restartPolicy": "RestartContainer"}]);
    node.run_pod(&restarts_to_resize, json!({"containers": [app]}))
        .await;
    node.server
        .store()
        .create(
            "limitranges",
            json!({"metadata": {"name": "cpu-max", "namespace": NS},
                   "spec": {"limits": [{"type": "Container", "max": {"cpu": "300m"}}]}}),
        )
        .unwrap();
    let before = (cgroup(&pod, None), cgroup(&pod, Some("app")));
    let app = |r: Value| json!([{"name": "app", "resources": r}]);

    let cases: Vec<(Value, &str, &str)> = vec![
        (
            json!({"podName": pod_name, "containers": app(json!({"requests": {"cpu": "200m", "memory": "64Mi"}}))}),
            "Failed",
            "QoS class from Burstable to Guaranteed",
        ),
        (
            json!({"podName": pod_name, "containers": app(json!({"requests": {"cpu": "500"}, "limits": {"cpu": "1000"}}))}),
            "Infeasible",
            "allocatable",
        ),
        (
            json!({"podName": pod_name, "containers": app(json!({"limits": {"cpu": "400m"}}))}),
            "Failed",
            "LimitRange cpu-max",
        ),
        (
            json!({"podName": pod_name, "containers": app(json!({"limits": {"memory": "32Mi"}}))}),
            "Failed",
            "current usage",
        ),
        (
            json!({"podName": requests_only, "containers": app(json!({"limits": {"cpu": "100m"}}))}),
            "Failed",
            "cannot add a resource",
        ),
        (
            json!({"podName": pod_name, "containers": app(json!({"limits": {"memory": "0"}}))}),
            "Failed",
            "greater than zero",
        ),
        (
            json!({"podName": pod_name, "containers": [{"name": "nope", "resources": {"limits": {"cpu": "1"}}}]}),
            "Failed",
            "no container \"nope\"",
        ),
        (
            json!({"podName": pod_name, "podUID": "00000000-0000-0000-0000-000000000000",
                   "containers": app(json!({"limits": {"cpu": "250m"}}))}),
            "Failed",
            "the request is for 00000000",
        ),
        (
            json!({"podName": "no-such-pod", "containers": app(json!({"limits": {"cpu": "250m"}}))}),
            "Failed",
            "not found on node",
        ),
        (
            json!({"podName": pod_name, "containers": "app"}),
            "Failed",
            "invalid spec",
        ),
        (
            json!({"podName": restarts_to_resize, "containers": app(json!({"limits": {"memory": "96Mi"}}))}),
            "Failed",
            "resizePolicy RestartContainer for memory",
        ),
    ];
    for (spec, phase, text) in cases {
        let name = node.create_resize(spec.clone()).await;
        let done = wait_final(&node, &name).await;
        assert_eq!(done["status"]["phase"], phase, "{spec}: {done:#}");
        assert!(message(&done).contains(text), "{spec}: {done:#}");
    }
    assert_eq!(node.proxy.calls("UpdateContainerResources"), 0);
    assert_eq!((cgroup(&pod, None), cgroup(&pod, Some("app"))), before);
    assert_eq!(
        metric(
            &mut node,
            "inplaced_resizes_total{actuator=\"cri\",result=\"Infeasible\"}"
        ),
        1.0
    );
    node.stop().await;
}

/// A resize the runtime refuses midway fails with the pod as it was: side's memory shrinks
/// and the pod cgroup's grows before app's update is refused, and both are put back (on each
/// of the two attempts the agent makes before failing the request), although putting back
/// app's own refused step is refused too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn a_resize_refused_midway_is_undone() {
    let node = Node::start_with(NodeOptions::kubelet("v1.31.12")).await;
    let pod_name = unique("resize-undone");
    let pod = node.run_pod(&pod_name, two_containers()).await;
    let (app_id, side_id) = (container_id(&pod, "app"), container_id(&pod, "side"));
    let refused = node.proxy.add(
        FaultRule::new(
            "UpdateContainerResources",
            Fault::error(Code::InvalidArgument),
        )
        .for_container(&app_id),
    );
    let name = create_resize(
        &node,
        &pod_name,
        json!([
            {"name": "app", "resources": resources("200m", "48Mi", "400m", "96Mi")},
            {"name": "side", "resources": {"limits": {"cpu": "50m", "memory": "24Mi"}}},
        ]),
    )
    .await;
    let done = wait_final(&node, &name).await;
    assert_eq!(done["status"]["phase"], "Failed", "{done:#}");
    // Two attempts, each refused, and each putting back the refused step too (it might have
    // half happened), which is refused as well.
    assert_eq!(node.proxy.fired(refused), 4);
    assert_eq!(cgroup(&pod, None), held(BEFORE_POD));
    assert_eq!(cgroup(&pod, Some("app")), held(BEFORE_APP));
    assert_eq!(cgroup(&pod, Some("side")), held(BEFORE_SIDE));
    assert_eq!(cri_linux(&side_id).await, (51, 10_000, 32 * MI));
    assert_eq!(cri_linux(&app_id).await, (102, 20_000, 64 * MI));
    assert!(
        message(&done).contains("the changes already made were undone"),
        "{done:#}"
    );
    node.stop().await;
}

/// A container the kubelet replaces starts from the pod spec's resources: while the succeeded
/// `cri` request exists, the agent applies the resize again (counted on the request and in the
/// metrics). The request is made by `inplaced resize`, which follows it to the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn cri_resize_is_reapplied_after_the_kubelet_restarts_the_container() {
    let mut node = Node::start_with(NodeOptions::kubelet("v1.31.12")).await;
    let pod_name = unique("reapply");
    let pod = node
        .run_pod(
            &pod_name,
            json!({"containers": [busybox("app", POLITE, resources("100m", "32Mi", "200m", "64Mi"))]}),
        )
        .await;
    // A user's kubeconfig (not the agent's identity).
    let user_kubeconfig = tempfile::NamedTempFile::new().unwrap();
    node.server
        .write_kubeconfig(user_kubeconfig.path(), None)
        .unwrap();
    let kubeconfig = user_kubeconfig.path().display().to_string();
    let output = Command::new(env!("CARGO_BIN_EXE_inplaced"))
        .args(["resize", &pod_name, "-n", NS, "-c", "app"])
        .args(["--cpu-limit", "400m", "--memory-limit", "96Mi"])
        .args(["--timeout", "60s", "--kubeconfig", &kubeconfig])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("Succeeded (cri)"), "{stdout}");
    let name = stdout
        .lines()
        .find_map(|l| l.strip_prefix("containerresizerequest/"))
        .and_then(|l| l.split_whitespace().next())
        .unwrap()
        .to_string();
    let grown = Limits {
        shares: 102,
        quota: 40_000,
        memory: 96 * MI,
    };
    assert_eq!(cgroup(&pod, Some("app")), held(grown));

    // The application dies; the kubelet starts a new container from the spec (200m, 64Mi).
    let old = container_id(&pod, "app");
    support::client()
        .stop_container(&old, Duration::from_secs(5))
        .await
        .unwrap();
    let done = wait_resize(&node, &name, |r| result_of(r, "app")["reapplied"] == 1).await;
    let new = result_of(&done, "app")["containerID"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(new, old);
    let restarted = node
        .wait_pod(&pod_name, WAIT, |p| container_id(p, "app") == new)
        .await;
    assert_eq!(cgroup(&restarted, Some("app")), held(grown));
    assert_eq!(cri_linux(&new).await, (102, 40_000, 96 * MI));
    assert_eq!(metric(&mut node, "inplaced_resize_reapplies_total"), 1.0);

    // A request the agent refuses: exit code 1 and the reason on stdout.
    let refused = Command::new(env!("CARGO_BIN_EXE_inplaced"))
        .args([
            "resize",
            &pod_name,
            "-n",
            NS,
            "-c",
            "app",
            "--cpu-request",
            "400m",
        ])
        .args(["--memory-request", "96Mi", "--timeout", "60s"])
        .args(["--kubeconfig", &kubeconfig])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&refused.stdout);
    assert_eq!(refused.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("QoS class"), "{stdout}");
    node.stop().await;
}

/// kubelet 1.35: the agent asks through `pods/resize` and follows the PodResizePending
/// condition: Deferred while another pod holds the node's cpu, Succeeded once it is gone; the
/// kubelet stand-in does the actuation (cgroup files) and the API's pod shows the new values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn kubelet_actuator_through_pods_resize_deferred_then_done() {
    let node = Node::start_with(NodeOptions::kubelet("v1.35.7").allocatable_cpu(1000)).await;
    let hog = unique("hog");
    node.run_pod(
        &hog,
        json!({"containers": [busybox("app", POLITE, resources("600m", "16Mi", "600m", "32Mi"))]}),
    )
    .await;
    let pod_name = unique("via-kubelet");
    let pod = node
        .run_pod(
            &pod_name,
            json!({"containers": [busybox("app", POLITE, resources("100m", "32Mi", "200m", "64Mi"))]}),
        )
        .await;
    let name = create_resize(
        &node,
        &pod_name,
        json!([{"name": "app", "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "500m"}}}]),
    )
    .await;
    let deferred = wait_resize(&node, &name, phase_is("Deferred")).await;
    assert_eq!(deferred["status"]["actuator"], "kubelet", "{deferred:#}");
    assert!(
        message(&deferred).contains("deferred by the kubelet"),
        "{deferred:#}"
    );
    assert_eq!(
        node.pod(&pod_name).unwrap()["spec"]["containers"][0]["resources"],
        resources("500m", "32Mi", "500m", "64Mi"),
        "pods/resize changed the spec"
    );

    node.server.store().delete("pods", NS, &hog).unwrap();
    let done = wait_final(&node, &name).await;
    assert_eq!(done["status"]["phase"], "Succeeded", "{done:#}");
    assert_eq!(done["status"]["actuator"], "kubelet");
    assert!(message(&done).contains("pods/resize"), "{done:#}");
    assert_eq!(
        cgroup(&pod, Some("app")),
        held(Limits {
            shares: 512,
            quota: 50_000,
            memory: 64 * MI
        })
    );
    // The agent itself never touched the container.
    assert_eq!(node.proxy.calls("UpdateContainerResources"), 0);
    node.stop().await;
}

/// A kubelet config file holding `text`, for `--kubelet-config`.
fn kubelet_config_file(text: &str) -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), text).unwrap();
    file
}

/// kubelet 1.30 with the gate on, as its config file says: the agent patches the pod spec and
/// follows `status.resize`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn kubelet_actuator_through_the_pod_spec_on_1_30_with_the_gate() {
    let kubelet_config = kubelet_config_file(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         featureGates:\n  InPlacePodVerticalScaling: true\n",
    );
    let path = kubelet_config.path().display().to_string();
    let node = Node::start_with(
        NodeOptions::kubelet("v1.30.7")
            .gate(true)
            .agent_args(&["--kubelet-config", &path]),
    )
    .await;
    resized_by_the_kubelet(&node, "the pod spec", "kubelet 1.30 with its config file").await;
    node.stop().await;
}

/// A pod's app container resized from 200m/64Mi to 300m/80Mi limits through the kubelet: the
/// request succeeds through `through` (the API the message names), the cgroup follows, and the
/// agent never touches the container itself.
async fn resized_by_the_kubelet(node: &Node, through: &str, case: &str) {
    let pod_name = unique("by-kubelet");
    let pod = node
        .run_pod(
            &pod_name,
            json!({"containers": [busybox("app", POLITE, resources("100m", "32Mi", "200m", "64Mi"))]}),
        )
        .await;
    let name = create_resize(
        node,
        &pod_name,
        json!([{"name": "app", "resources": {"limits": {"cpu": "300m", "memory": "80Mi"}}}]),
    )
    .await;
    let done = wait_final(node, &name).await;
    assert_eq!(done["status"]["phase"], "Succeeded", "{case}: {done:#}");
    assert_eq!(
        done["status"]["actuator"],
        "kubelet",
        "{case}: {done:#}\npod status: {:#}",
        node.pod(&pod_name).unwrap()["status"]
    );
    assert!(message(&done).contains(through), "{case}: {done:#}");
    assert_eq!(
        cgroup(&pod, Some("app")),
        held(Limits {
            shares: 102,
            quota: 30_000,
            memory: 80 * MI
        }),
        "{case}"
    );
    assert_eq!(node.proxy.calls("UpdateContainerResources"), 0, "{case}");
}

/// Every skew pair the sandbox models: a kubelet with the gate on, up to three minors older
/// than its API server (gate on). The resize API follows the API server (discovery), the
/// actuator what the kubelet reports in the pod status (no kubelet config file is given), the
/// outcome the kubelet's own way of reporting (`status.resize` before 1.33, conditions after).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn kubelet_actuator_follows_the_api_server_in_every_skew_pair() {
    let pairs = [
        ("v1.30.14", 31, "the pod spec"),
        ("v1.30.14", 32, "pods/resize"),
        ("v1.30.14", 33, "pods/resize"),
        ("v1.31.12", 34, "pods/resize"),
        ("v1.32.4", 35, "pods/resize"),
        ("v1.33.5", 36, "pods/resize"),
    ];
    for (kubelet, api_server, through) in pairs {
        let node = Node::start_with(
            NodeOptions::kubelet(kubelet)
                .gate(true)
                .api_server(api_server),
        )
        .await;
        let pair = format!("kubelet {kubelet}, API server 1.{api_server}");
        resized_by_the_kubelet(&node, through, &pair).await;
        node.stop().await;
    }
}

/// 1.33's API validation refuses a memory limit decrease unless the container's memory resize
/// policy restarts it: the request fails with the API server's words and nothing changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn a_memory_limit_decrease_is_refused_by_a_1_33_api_server() {
    let node = Node::start_with(NodeOptions::kubelet("v1.33.5")).await;
    let pod_name = unique("shrink-133");
    let pod = node
        .run_pod(
            &pod_name,
            json!({"containers": [busybox("app", POLITE, resources("100m", "32Mi", "200m", "64Mi"))]}),
        )
        .await;
    let name = create_resize(
        &node,
        &pod_name,
        json!([{"name": "app", "resources": {"limits": {"memory": "48Mi"}}}]),
    )
    .await;
    let done = wait_final(&node, &name).await;
    assert_eq!(done["status"]["phase"], "Failed", "{done:#}");
    assert!(
        message(&done)
            .contains("memory limits cannot be decreased unless resizePolicy is RestartContainer"),
        "{done:#}"
    );
    assert_eq!(cgroup(&pod, Some("app")).memory, 64 * MI);
    node.stop().await;
}

/// From 1.34 the API lets a memory limit decrease through and the kubelet decides: below the
/// memory in use it does not apply it, says why in `PodResizeInProgress` (reason Error) and
/// tries again; the request waits with the kubelet's words, and the limit stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn a_1_34_kubelet_keeps_a_memory_limit_above_the_memory_in_use() {
    let node = Node::start_with(NodeOptions::kubelet("v1.34.2")).await;
    let pod_name = unique("shrink-134");
    // 20 MiB held by the shell (which needs about twice that while it reads them), charged
    // to the container's memory cgroup.
    let hog = format!(
        "fill=$(head -c {} /dev/zero | tr '\\0' x); {POLITE}",
        20 * MI
    );
    let pod = node
        .run_pod(
            &pod_name,
            json!({"containers": [busybox("app", &hog, resources("100m", "32Mi", "200m", "64Mi"))]}),
        )
        .await;
    // The shell fills its variable after the container started: wait for the memory in use.
    let usage_file = if cgroup_v2() {
        format!(
            "/sys/fs/cgroup/{}/memory.current",
            cgroup_dir(&pod, Some("app"))
        )
    } else {
        format!(
            "/sys/fs/cgroup/memory/{}/memory.usage_in_bytes",
            cgroup_dir(&pod, Some("app"))
        )
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let usage: i64 = std::fs::read_to_string(&usage_file)
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0);
        if usage >= 20 * MI {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{usage_file}: {usage} bytes in use"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let name = create_resize(
        &node,
        &pod_name,
        json!([{"name": "app", "resources": {"requests": {"memory": "8Mi"}, "limits": {"memory": "12Mi"}}}]),
    )
    .await;
    let waiting = wait_resize(&node, &name, |r| {
        message(r).contains("the kubelet could not apply the resize and retries")
    })
    .await;
    assert!(
        message(&waiting).contains("at or below its current usage"),
        "{waiting:#}"
    );
    assert_ne!(waiting["status"]["phase"], "Succeeded", "{waiting:#}");
    let now = node.pod(&pod_name).expect("pod");
    assert_eq!(
        container_id(&now, "app"),
        container_id(&pod, "app"),
        "the container was not restarted"
    );
    assert_eq!(cgroup(&pod, Some("app")).memory, 64 * MI);
    node.stop().await;
}

/// An API server with the gate off (1.33, where it is on by default) beside a kubelet with it
/// on: the kubelet reports applied resources, the server drops them from the pod status, and
/// serves no resize API. The agent sees no kubelet that resizes and resizes through CRI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn an_api_server_without_the_gate_hides_the_kubelet_and_the_agent_resizes_through_cri() {
    let node = Node::start_with(
        NodeOptions::kubelet("v1.33.5")
            .gate(true)
            .api_server_with_gate(33, false),
    )
    .await;
    let pod_name = unique("gate-off-api");
    let pod = node
        .run_pod(
            &pod_name,
            json!({"containers": [busybox("app", POLITE, resources("100m", "32Mi", "200m", "64Mi"))]}),
        )
        .await;
    let reported = node.pod(&pod_name).unwrap();
    assert!(
        reported["status"]["containerStatuses"][0]
            .get("resources")
            .is_none(),
        "the server keeps what the kubelet reports: {reported:#}"
    );
    let name = create_resize(
        &node,
        &pod_name,
        json!([{"name": "app", "resources": {"limits": {"cpu": "300m"}}}]),
    )
    .await;
    let done = wait_final(&node, &name).await;
    assert_eq!(done["status"]["phase"], "Succeeded", "{done:#}");
    assert_eq!(done["status"]["actuator"], "cri", "{done:#}");
    assert_eq!(cgroup(&pod, Some("app")).quota, 30_000);
    node.stop().await;
}

/// A kubelet with the gate off reports no applied resources: `auto` resizes through CRI even
/// when its config file claims the gate is on, and the API server is left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn the_pod_status_outweighs_the_kubelet_config_file() {
    // JSON, which kubelet also reads.
    let kubelet_config = kubelet_config_file(
        "{\"kind\": \"KubeletConfiguration\", \"featureGates\": {\"InPlacePodVerticalScaling\": true}}\n",
    );
    let path = kubelet_config.path().display().to_string();
    let node = Node::start_with(
        NodeOptions::kubelet("v1.31.12")
            .api_server(31)
            .agent_args(&["--kubelet-config", &path]),
    )
    .await;
    let pod_name = unique("no-gate");
    let pod = node
        .run_pod(
            &pod_name,
            json!({"containers": [busybox("app", POLITE, resources("100m", "32Mi", "200m", "64Mi"))]}),
        )
        .await;
    let name = create_resize(
        &node,
        &pod_name,
        json!([{"name": "app", "resources": {"limits": {"cpu": "300m"}}}]),
    )
    .await;
    let done = wait_final(&node, &name).await;
    assert_eq!(done["status"]["phase"], "Succeeded", "{done:#}");
    assert_eq!(done["status"]["actuator"], "cri", "{done:#}");
    assert_eq!(cgroup(&pod, Some("app")).quota, 30_000);
    assert_eq!(
        node.pod(&pod_name).unwrap()["spec"]["containers"][0]["resources"],
        resources("100m", "32Mi", "200m", "64Mi"),
        "the pod spec is left alone"
    );
    node.stop().await;
}
