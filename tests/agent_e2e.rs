//! The agent binary end to end: the API server double for pods, the real containerd for
//! containers, a real NOTIFY_SOCKET, real HTTP.

mod support;

use std::process::Command;
use std::time::Duration;

use apiserver_double::{ApiServer, ServerConfig};
use nix::sys::signal::Signal;
use serde_json::{Value, json};
use support::agent::AgentProcess;
use support::{TEST_IMAGE, TestPod, client, endpoint, unique};

const NAMESPACE: &str = "inplaced-test";

/// A node, a two-container pod on it (only `app` runs in containerd), and a pod on another node.
struct Fixture {
    server: ApiServer,
    node: String,
    pod_name: String,
    runtime_pod: TestPod,
    app_id: String,
    kubeconfig: tempfile::NamedTempFile,
}

async fn fixture() -> Fixture {
    let server = ApiServer::start(ServerConfig::default()).await.unwrap();
    let node = unique("node");
    let store = server.store();
    store
        .create(
            "nodes",
            json!({"metadata": {"name": node}, "status": {"nodeInfo": {"kubeletVersion": "v1.30.7"}}}),
        )
        .unwrap();
    let pod_name = unique("web");
    let pod = store
        .create(
            "pods",
            json!({
                "metadata": {"name": pod_name, "namespace": NAMESPACE},
                "spec": {"nodeName": node, "containers": [
                    {"name": "app", "image": TEST_IMAGE},
                    {"name": "sidecar", "image": TEST_IMAGE}
                ]}
            }),
        )
        .unwrap();
    store
        .create(
            "pods",
            json!({
                "metadata": {"name": unique("elsewhere"), "namespace": NAMESPACE},
                "spec": {"nodeName": "another-node", "containers": [{"name": "app", "image": TEST_IMAGE}]}
            }),
        )
        .unwrap();
    let uid = pod["metadata"]["uid"].as_str().unwrap().to_string();
    let cri = client();
    let runtime_pod = TestPod::run_for(&cri, &pod_name, NAMESPACE, &uid, "web").await;
    let app_id = runtime_pod
        .start_container(&cri, "app", "exec sleep 600", "5d295228")
        .await;
    let kubeconfig = tempfile::NamedTempFile::new().unwrap();
    server.write_kubeconfig(kubeconfig.path(), None).unwrap();
    Fixture {
        server,
        node,
        pod_name,
        runtime_pod,
        app_id,
        kubeconfig,
    }
}

fn agent_args(f: &Fixture) -> Vec<String> {
    vec![
        "--node-name".into(),
        f.node.clone(),
        "--kubeconfig".into(),
        f.kubeconfig.path().display().to_string(),
        "--cri-endpoint".into(),
        endpoint().to_string(),
    ]
}

fn pods_json(args: &[String]) -> (Value, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_inplaced"))
        .args(["pods", "-o", "json"])
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    assert!(output.status.success(), "inplaced pods failed: {stderr}");
    (
        serde_json::from_slice(&output.stdout).expect("pods JSON"),
        stderr,
    )
}

fn check_view(view: &Value, f: &Fixture) {
    let pods = view["pods"].as_array().unwrap();
    assert_eq!(pods.len(), 1, "only this node's pods: {view:#}");
    let pod = &pods[0];
    assert_eq!(pod["name"], f.pod_name.as_str());
    assert_eq!(pod["sandbox_id"], f.runtime_pod.sandbox_id.as_str());
    assert_eq!(pod["sandbox_ready"], true);
    let app = &pod["containers"][0];
    assert_eq!(app["name"], "app");
    assert_eq!(
        app["runtime"]["container_id"],
        format!("containerd://{}", f.app_id)
    );
    assert_eq!(app["runtime"]["state"], "running");
    assert_eq!(app["runtime"]["restart_count"], 0);
    assert_eq!(app["runtime"]["stored_hash"], "5d295228");
    assert!(
        app["runtime"]["times"]["started_at"].as_i64().unwrap() > 0,
        "CRI start time: {app:#}"
    );
    let sidecar = &pod["containers"][1];
    assert_eq!(sidecar["name"], "sidecar");
    assert!(
        sidecar["runtime"].is_null(),
        "not in the runtime: {sidecar:#}"
    );
    assert!(view["runtime"].as_str().unwrap().starts_with("containerd "));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn agent_notifies_systemd_serves_health_and_the_node_view() {
    let f = fixture().await;
    let args = agent_args(&f);
    let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut agent = AgentProcess::start(&arg_refs, Some(Duration::from_secs(1)));

    agent.wait_notification(Duration::from_secs(10), |n| n == "READY=1");
    agent.wait_http("/readyz", 200, Duration::from_secs(20));
    agent.wait_notification(Duration::from_secs(10), |n| {
        n.starts_with("STATUS=ready: 1 pods")
    });
    agent.wait_notification(Duration::from_secs(5), |n| n == "WATCHDOG=1");
    assert_eq!(agent.get("/healthz").unwrap(), (200, "ok\n".to_string()));

    // The operator command asks the running agent over its admin socket.
    let (view, stderr) = pods_json(&[
        "--node-name".into(),
        f.node.clone(),
        "--admin-socket".into(),
        agent.admin_socket.display().to_string(),
    ]);
    assert!(!stderr.contains("no agent answers"), "{stderr}");
    check_view(&view, &f);
    assert_eq!(view["kubelet_version"], "v1.30.7");

    let (code, metrics) = agent.get("/metrics").unwrap();
    assert_eq!(code, 200);
    assert!(
        metrics.contains(
            "inplaced_cri_request_duration_seconds_count{method=\"ListContainers\",code=\"Ok\"}"
        ),
        "{metrics}"
    );
    assert!(metrics.contains("inplaced_api_request_duration_seconds_count{verb=\"list\",resource=\"pods\",code=\"200\"}"), "{metrics}");
    assert!(metrics.contains("inplaced_build_info"), "{metrics}");

    // A good citizen: pods are listed and watched for this node only.
    let pod_requests: Vec<_> = f
        .server
        .audit()
        .entries()
        .into_iter()
        .filter(|e| e.rbac_resource() == "pods")
        .collect();
    assert!(!pod_requests.is_empty());
    let agent_version = concat!("inplaced/", env!("CARGO_PKG_VERSION"));
    assert!(
        pod_requests.iter().all(|e| e.user_agent == agent_version),
        "every request names the agent: {pod_requests:?}"
    );
    assert!(
        pod_requests[0].request.verb == "list"
            && pod_requests[0].query.contains("resourceVersion=0"),
        "initial list served from the watch cache: {:?}",
        pod_requests[0]
    );
    for entry in &pod_requests {
        assert!(
            matches!(entry.request.verb.as_str(), "list" | "watch")
                && entry.query.contains("spec.nodeName"),
            "unexpected pod request {entry:?}"
        );
    }

    // The pod cache survives dropped watches and a 410 relist: a pod created meanwhile shows up.
    f.server.store().compact();
    f.server.faults().drop_watches();
    let late = unique("late");
    f.server
        .store()
        .create(
            "pods",
            json!({"metadata": {"name": late, "namespace": NAMESPACE},
                   "spec": {"nodeName": f.node, "containers": [{"name": "app", "image": TEST_IMAGE}]}}),
        )
        .unwrap();
    agent.wait_notification(Duration::from_secs(30), |n| {
        n.starts_with("STATUS=ready: 2 pods")
    });

    agent.signal(Signal::SIGTERM);
    agent.wait_notification(Duration::from_secs(5), |n| n == "STOPPING=1");
    assert!(agent.wait_exit(Duration::from_secs(10)).success());
    assert!(!agent.admin_socket.exists(), "admin socket removed on exit");
    f.runtime_pod.remove(&client()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn pods_command_builds_the_view_itself_when_no_agent_runs() {
    let f = fixture().await;
    let dir = tempfile::tempdir().unwrap();
    let mut args = agent_args(&f);
    args.extend([
        "--admin-socket".into(),
        dir.path().join("none.sock").display().to_string(),
    ]);
    let (view, stderr) = pods_json(&args);
    assert!(stderr.contains("no agent answers"), "{stderr}");
    check_view(&view, &f);
    f.runtime_pod.remove(&client()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_stays_up_and_unready_while_the_api_is_unreachable() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    // Nothing listens on this port: the API "server" is down.
    let down = support::agent::free_port();
    std::fs::write(
        &kubeconfig,
        apiserver_double::kubeconfig_for(&format!("http://{down}"), None),
    )
    .unwrap();
    let kubeconfig = kubeconfig.display().to_string();
    let node = unique("node");
    let cri = endpoint().to_string();
    let mut agent = AgentProcess::start(
        &[
            "--node-name",
            &node,
            "--kubeconfig",
            &kubeconfig,
            "--cri-endpoint",
            &cri,
        ],
        None,
    );
    // READY=1 does not wait for the API server: an outage at boot must not be a restart loop.
    agent.wait_notification(Duration::from_secs(10), |n| n == "READY=1");
    let body = agent.wait_http("/readyz", 503, Duration::from_secs(10));
    assert!(body.contains("pods: pod cache not synced yet"), "{body}");
    agent.wait_notification(Duration::from_secs(5), |n| {
        n.starts_with("STATUS=waiting: node: node object not synced yet; pods")
    });
    assert_eq!(agent.get("/healthz").unwrap().0, 200);
    // Watch failures are retried and counted.
    std::thread::sleep(Duration::from_secs(2));
    let (_, metrics) = agent.get("/metrics").unwrap();
    assert!(
        metrics.contains("inplaced_watch_restarts_total{resource=\"pods\"}"),
        "{metrics}"
    );
    agent.signal(Signal::SIGTERM);
    assert!(agent.wait_exit(Duration::from_secs(10)).success());
}

#[test]
fn configuration_precedence_is_flags_then_environment_then_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    std::fs::write(
        &file,
        "node-name = \"from-file\"\nlisten-address = \"127.0.0.1:3333\"\nrefresh-interval = \"7s\"\napi-qps = 9\n",
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_inplaced"))
        .args([
            "agent",
            "--print-config",
            "--config",
            file.to_str().unwrap(),
        ])
        .args(["--listen-address", "127.0.0.1:1111"])
        .env("INPLACED_LISTEN_ADDRESS", "127.0.0.1:2222")
        .env("INPLACED_REFRESH_INTERVAL", "5s")
        .env_remove("NODE_NAME")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        text.contains("listen_address: 127.0.0.1:1111"),
        "flag beats env and file: {text}"
    );
    assert!(
        text.contains("refresh_interval: 5s"),
        "env beats file: {text}"
    );
    assert!(
        text.contains("node_name: \"from-file\""),
        "file beats default: {text}"
    );
    assert!(text.contains("api_qps: 9"), "{text}");
    assert!(text.contains("api_burst: 10"), "default: {text}");
}

#[test]
fn bad_configuration_is_one_clear_error_and_exit_code_2() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "listen-adress = \"127.0.0.1:1\"\n",
            "unknown field `listen-adress`",
        ),
        (
            "refresh-interval = \"soon\"\n",
            "invalid refresh-interval \"soon\"",
        ),
        ("api-qps = \"many\"\n", "line 1"),
    ];
    for (content, expected) in cases {
        let file = dir.path().join("config.toml");
        std::fs::write(&file, content).unwrap();
        let output = Command::new(env!("CARGO_BIN_EXE_inplaced"))
            .args([
                "agent",
                "--node-name",
                "n1",
                "--config",
                file.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{content}: {stderr}");
        assert!(stderr.contains(expected), "{content}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "one error line: {stderr}");
    }
}

/// Golden containers (as an API server returns them) run with the hash kubelet 1.30.7 stored.
/// What a kubelet upgrade would do, and which releases wrote the stored hash, must agree with
/// the golden hashes of every release — values from the real Go code, not from inplaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn upgrade_check_and_era_detection_agree_with_golden_hashes() {
    const TAGS: &[&str] = &[
        "real-nginx-apiserver-defaulted",
        "real-coredns-apiserver-defaulted",
        "real-redis-apiserver-defaulted",
        "real-etcd-apiserver-defaulted",
        "real-cilium-agent-apiserver-defaulted",
    ];
    const GOLDEN_RELEASES: &[(u32, &str)] = &[
        (26, "1.26.15"),
        (27, "1.27.15"),
        (28, "1.28.11"),
        (29, "1.29.6"),
        (30, "1.30.7"),
        (31, "1.31.12"),
        (32, "1.32.10"),
        (33, "1.33.13"),
        (34, "1.34.10"),
        (35, "1.35.7"),
        (36, "1.36.3"),
    ];
    let server = ApiServer::start(ServerConfig::default()).await.unwrap();
    let node = unique("node");
    server
        .store()
        .create("nodes", json!({"metadata": {"name": node}, "status": {"nodeInfo": {"kubeletVersion": "v1.30.7"}}}))
        .unwrap();
    let cri = client();
    let mut runtime_pods = Vec::new();
    for tag in TAGS {
        let golden = support::golden::row("1.30.7", tag);
        let container: Value =
            serde_json::from_str(golden["input_text"].as_str().unwrap()).unwrap();
        let name = container["name"].as_str().unwrap().to_string();
        let pod_name = unique(&name);
        let pod = server
            .store()
            .create(
                "pods",
                json!({"metadata": {"name": pod_name, "namespace": NAMESPACE}, "spec": {"nodeName": node, "containers": [container]}}),
            )
            .unwrap();
        let uid = pod["metadata"]["uid"].as_str().unwrap();
        let runtime_pod = TestPod::run_for(&cri, &pod_name, NAMESPACE, uid, "golden").await;
        // The runtime runs busybox under the spec container's name, with kubelet 1.30's hash.
        runtime_pod
            .start_container(
                &cri,
                &name,
                "exec sleep 600",
                golden["hash"].as_str().unwrap(),
            )
            .await;
        runtime_pods.push((tag, pod_name, runtime_pod));
    }
    let kubeconfig = tempfile::NamedTempFile::new().unwrap();
    server.write_kubeconfig(kubeconfig.path(), None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    // The kubelet's root directory holds the allocation checkpoint a 1.27–1.31 kubelet with
    // the resize gate left behind.
    let kubelet_root = tempfile::tempdir().unwrap();
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/checkpoints/v1.27-pod_status_manager_state"
        ),
        kubelet_root.path().join("pod_status_manager_state"),
    )
    .unwrap();
    let args = [
        "--node-name".to_string(),
        node.clone(),
        "--kubeconfig".into(),
        kubeconfig.path().display().to_string(),
        "--cri-endpoint".into(),
        endpoint().to_string(),
        "--admin-socket".into(),
        dir.path().join("none.sock").display().to_string(),
        "--kubelet-root-dir".into(),
        kubelet_root.path().display().to_string(),
    ];

    let (view, _) = pods_json(&args);
    for (tag, pod_name, _) in &runtime_pods {
        let pod = view["pods"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == pod_name.as_str())
            .unwrap();
        let check = &pod["containers"][0]["hash_check"];
        assert_eq!(
            check["current"], true,
            "{tag}: kubelet 1.30.7 wrote it: {check:#}"
        );
        let written_by = check["written_by"].as_array().unwrap();
        let covers = |minor: u32| {
            written_by.iter().any(|range| {
                let range = range.as_str().unwrap();
                let (lo, hi) = range.split_once('–').unwrap_or((range, range));
                let minor_of = |v: &str| v.trim_start_matches("1.").parse::<u32>().unwrap();
                (minor_of(lo)..=minor_of(hi)).contains(&minor)
            })
        };
        let stored = support::golden::row("1.30.7", tag)["hash"].clone();
        for (minor, release) in GOLDEN_RELEASES {
            let golden_hash = support::golden::row(release, tag)["hash"].clone();
            assert_eq!(
                covers(*minor),
                golden_hash == stored,
                "{tag}: release 1.{minor} in {written_by:?}?"
            );
        }
    }

    for (to, release) in [
        ("1.31", "1.31.12"),
        ("1.30.7", "1.30.7"),
        ("1.26", "1.26.15"),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_inplaced"))
            .args(["upgrade-check", "--to", to, "-o", "json"])
            .args(&args)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let report: Value = serde_json::from_slice(&output.stdout).unwrap();
        for (tag, pod_name, _) in &runtime_pods {
            let verdict = report["containers"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["pod"] == pod_name.as_str())
                .unwrap();
            let stored = support::golden::row("1.30.7", tag)["hash"].clone();
            let target = support::golden::row(release, tag)["hash"].clone();
            assert_eq!(verdict["target_hash"], target, "{tag} under {to}");
            let expected = if target == stored { "keep" } else { "restart" };
            assert_eq!(
                verdict["verdict"], expected,
                "{tag} under {to}: {verdict:#}"
            );
        }
    }
    // The checkpoint: read by 1.31, refused by 1.32 (with what to do), ignored from 1.33.
    for (to, verdict) in [("1.31", "read"), ("1.32", "refused"), ("1.33", "ignored")] {
        let output = Command::new(env!("CARGO_BIN_EXE_inplaced"))
            .args(["upgrade-check", "--to", to, "-o", "json"])
            .args(&args)
            .output()
            .unwrap();
        let report: Value = serde_json::from_slice(&output.stdout).unwrap();
        let findings = report["checkpoints"].as_array().unwrap();
        assert_eq!(findings.len(), 1, "{report:#}");
        assert_eq!(findings[0]["verdict"], verdict, "{to}: {:#}", findings[0]);
        assert_eq!(findings[0]["format"], "status-manager-v127");
    }
    let table = Command::new(env!("CARGO_BIN_EXE_inplaced"))
        .args(["upgrade-check", "--to", "1.32"])
        .args(&args)
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.contains("pod_status_manager_state (refused)") && table.contains("delete"),
        "{table}"
    );
    for (_, _, runtime_pod) in runtime_pods {
        runtime_pod.remove(&cri).await;
    }
}

/// A worker that hangs (the recreate request loop, told by the test-only fault switch to await
/// forever once it has a request, as a call that never returns would leave it) while the main
/// loop goes on: once it has gone `stuck-worker-after` without progress, /healthz fails naming
/// it and the watchdog is no longer pinged, so systemd would restart the agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn a_hung_worker_fails_healthz_and_stops_the_watchdog() {
    let f = fixture().await;
    let mut args = agent_args(&f);
    args.extend(["--stuck-worker-after".into(), "3s".into()]);
    let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut agent = AgentProcess::start_with_env(
        &arg_refs,
        Some(Duration::from_secs(1)),
        &[("INPLACED_TEST_HANG_WORKER", "recreate")],
    );
    agent.wait_notification(Duration::from_secs(10), |n| n == "READY=1");
    agent.wait_http("/readyz", 200, Duration::from_secs(20));
    agent.wait_notification(Duration::from_secs(5), |n| n == "WATCHDOG=1");
    assert_eq!(agent.get("/healthz").unwrap().0, 200, "no request, no hang");

    f.server
        .store()
        .create(
            "containerrecreaterequests.apps.kruise.io",
            json!({
                "metadata": {"name": unique("crr"), "namespace": NAMESPACE, "labels": {
                    "crr.apps.kruise.io/node-name": f.node,
                    "crr.apps.kruise.io/active": "true"}},
                "spec": {"podName": f.pod_name, "containers": [{"name": "app"}]}
            }),
        )
        .unwrap();
    let started = std::time::Instant::now();
    let body = agent.wait_http("/healthz", 500, Duration::from_secs(20));
    assert!(body.contains("recreate made no progress for"), "{body}");
    eprintln!("hang detected after {:?}", started.elapsed());
    // Notifications already sent drain first; then none for longer than the watchdog interval.
    agent.collect_notifications(Duration::from_millis(600));
    let later = agent.collect_notifications(Duration::from_secs(3));
    assert!(
        !later.iter().any(|n| n == "WATCHDOG=1"),
        "the watchdog is still pinged: {later:?}"
    );
    assert!(
        agent
            .log()
            .contains("a worker is stuck; not pinging the watchdog")
    );
    assert!(
        agent.log().contains("test fault INPLACED_TEST_HANG_WORKER"),
        "the fault fired"
    );
}
