//! `node-sandbox`: a whole local node for the demo and manual testing — the API server double,
//! the Node object, the kubelet stand-in and the kruise-manager stand-in (optionally the CRI
//! fault proxy) — plus small client subcommands (no kubectl here).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use apiserver_double::{ApiServer, ServerConfig};
use clap::{Parser, Subcommand};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use node_sandbox::criproxy::CriProxy;
use node_sandbox::kubelet::{KubeletConfig, KubeletStandIn};
use node_sandbox::manager::{self, ManagerConfig, ManagerStandIn};
use node_sandbox::util;
use serde_json::{Value, json};

#[derive(Parser)]
#[command(
    name = "node-sandbox",
    about = "Local node sandbox for inplaced (test use only)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the API double, Node, kubelet and kruise-manager stand-ins until SIGTERM/SIGINT.
    Run(RunArgs),
    /// Create a host-network demo pod on the node.
    CreatePod(PodArgs),
    /// Wait until every container of a pod runs; print its container statuses.
    WaitPod(WaitArgs),
    /// Create a ContainerRecreateRequest for a pod (through the webhook stand-in).
    CreateCrr(CrrArgs),
    /// Wait until a CRR is Completed; print its status.
    WaitCrr(WaitArgs),
}

#[derive(clap::Args)]
struct RunArgs {
    /// Where the API double listens.
    #[arg(long, default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
    /// Write the kubeconfig for the API double here.
    #[arg(long)]
    kubeconfig_out: PathBuf,
    #[arg(long, env = "NODE_NAME", default_value = "sandbox-node")]
    node_name: String,
    /// The real runtime (the kubelet stand-in talks to it directly).
    #[arg(
        long,
        env = "INPLACED_TEST_CRI_ENDPOINT",
        default_value = "unix:///run/inplaced-test/containerd.sock"
    )]
    cri_endpoint: String,
    /// kubelet release to impersonate (stored hashes, node kubeletVersion).
    #[arg(long, default_value = "v1.30.7")]
    kubelet_version: String,
    /// Delay before an exited container is restarted.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    restart_delay: Duration,
    /// Also serve the CRI fault proxy (no faults set) at DIR/cri-proxy.sock.
    #[arg(long)]
    cri_proxy_dir: Option<PathBuf>,
    /// Play a kubelet with the InPlacePodVerticalScaling gate off (it then never resizes, and
    /// the agent's `auto` actuator resizes through CRI).
    #[arg(long)]
    no_resize_gate: bool,
}

#[derive(clap::Args)]
struct PodArgs {
    #[arg(long)]
    kubeconfig: PathBuf,
    #[arg(long, default_value = "demo")]
    name: String,
    #[arg(long, default_value = "default")]
    namespace: String,
    #[arg(long, env = "NODE_NAME", default_value = "sandbox-node")]
    node_name: String,
    #[arg(long, default_value = "localhost/busybox:local")]
    image: String,
    /// The container's shell script (default: ends at once on SIGTERM).
    #[arg(
        long,
        default_value = "trap 'echo bye; exit 0' TERM; echo started; while true; do sleep 1; done"
    )]
    script: String,
}

#[derive(clap::Args)]
struct WaitArgs {
    #[arg(long)]
    kubeconfig: PathBuf,
    #[arg(long)]
    name: String,
    #[arg(long, default_value = "default")]
    namespace: String,
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    timeout: Duration,
}

#[derive(clap::Args)]
struct CrrArgs {
    #[arg(long)]
    kubeconfig: PathBuf,
    #[arg(long)]
    name: String,
    #[arg(long)]
    pod: String,
    /// Containers to recreate (repeatable).
    #[arg(long = "container", required = true)]
    containers: Vec<String>,
    #[arg(long, default_value = "default")]
    namespace: String,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("NODE_SANDBOX_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(a) => run(a).await,
        Command::CreatePod(a) => create_pod(a).await,
        Command::WaitPod(a) => wait_pod(a).await,
        Command::CreateCrr(a) => create_crr(a).await,
        Command::WaitCrr(a) => wait_crr(a).await,
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("node-sandbox: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(a: RunArgs) -> anyhow::Result<()> {
    let server = ApiServer::start(ServerConfig {
        listen: a.listen,
        graceful_pod_deletion: true,
        ..Default::default()
    })
    .await
    .with_context(|| format!("listening on {}", a.listen))?;
    server.write_kubeconfig(&a.kubeconfig_out, None)?;
    let kubeconfig = server.kubeconfig(None);
    let proxy = match &a.cri_proxy_dir {
        Some(dir) => Some(CriProxy::start(dir, &a.cri_endpoint).await?),
        None => None,
    };
    let mut kc = KubeletConfig::new(&a.node_name, &kubeconfig, &a.cri_endpoint);
    kc.kubelet_version = a.kubelet_version.clone();
    kc.restart_delay = a.restart_delay;
    kc.resize_gate = !a.no_resize_gate;
    let kubelet = KubeletStandIn::start(kc).await?;
    let manager = ManagerStandIn::start(ManagerConfig::new(&kubeconfig)).await?;
    println!("node-sandbox up (pid {})", std::process::id());
    println!("  API server:   {}", server.url());
    println!("  kubeconfig:   {}", a.kubeconfig_out.display());
    println!(
        "  node:         {} (kubelet {})",
        a.node_name, a.kubelet_version
    );
    println!("  CRI runtime:  {}", a.cri_endpoint);
    if let Some(p) = &proxy {
        println!("  CRI proxy:    {}", p.endpoint());
    }
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    eprintln!("node-sandbox: stopping, removing the sandboxes of the node's pods");
    drop(manager);
    kubelet.stop().await?;
    drop(proxy);
    let _ = std::fs::remove_file(&a.kubeconfig_out);
    Ok(())
}

async fn client(path: &PathBuf) -> anyhow::Result<kube::Client> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    util::kube_client(&text).await
}

async fn create_pod(a: PodArgs) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(client(&a.kubeconfig).await?, &a.namespace);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": a.name, "namespace": a.namespace, "labels": {"app": a.name}},
        "spec": {
            "nodeName": a.node_name, "hostNetwork": true, "terminationGracePeriodSeconds": 10,
            "containers": [{
                "name": "main", "image": a.image,
                "command": ["/bin/sh", "-c", a.script],
                "resources": {"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"cpu": "500m", "memory": "64Mi"}},
                "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent"
            }]
        }
    }))?;
    let created = pods.create(&PostParams::default(), &pod).await?;
    println!(
        "pod {}/{} created (uid {})",
        a.namespace,
        a.name,
        created.metadata.uid.unwrap_or_default()
    );
    Ok(())
}

async fn wait_for(
    timeout: Duration,
    what: &str,
    mut check: impl AsyncFnMut() -> anyhow::Result<Option<Value>>,
) -> anyhow::Result<Value> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await? {
            return Ok(v);
        }
        anyhow::ensure!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn wait_pod(a: WaitArgs) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(client(&a.kubeconfig).await?, &a.namespace);
    let pod = wait_for(a.timeout, &format!("pod {} to run", a.name), async || {
        let Some(p) = pods.get_opt(&a.name).await? else {
            return Ok(None);
        };
        let v = serde_json::to_value(p)?;
        let statuses = v
            .pointer("/status/containerStatuses")
            .and_then(Value::as_array);
        let running = statuses.is_some_and(|s| {
            !s.is_empty() && s.iter().all(|c| c.pointer("/state/running").is_some())
        });
        Ok(running.then_some(v))
    })
    .await?;
    for c in pod
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        println!(
            "  {} {} restartCount={} ready={}",
            c["name"].as_str().unwrap_or(""),
            c["containerID"].as_str().unwrap_or(""),
            c["restartCount"],
            c["ready"]
        );
    }
    Ok(())
}

async fn create_crr(a: CrrArgs) -> anyhow::Result<()> {
    let containers: Vec<Value> = a.containers.iter().map(|c| json!({"name": c})).collect();
    let crr = json!({
        "metadata": {"name": a.name, "namespace": a.namespace},
        "spec": {"podName": a.pod, "containers": containers,
                 "strategy": {"failurePolicy": "Fail"}, "activeDeadlineSeconds": 300,
                 "ttlSecondsAfterFinished": 1800}
    });
    let created = manager::create_crr(&client(&a.kubeconfig).await?, crr).await?;
    println!(
        "ContainerRecreateRequest {}/{} created for pod {}",
        a.namespace,
        created["metadata"]["name"].as_str().unwrap_or(""),
        a.pod
    );
    Ok(())
}

async fn wait_crr(a: WaitArgs) -> anyhow::Result<()> {
    let ar: ApiResource = manager::crr_resource();
    let api: Api<DynamicObject> =
        Api::namespaced_with(client(&a.kubeconfig).await?, &a.namespace, &ar);
    let crr = wait_for(
        a.timeout,
        &format!("CRR {} to complete", a.name),
        async || {
            let Some(c) = api.get_opt(&a.name).await? else {
                anyhow::bail!("CRR {} not found", a.name)
            };
            let v = serde_json::to_value(c)?;
            Ok(
                (v.pointer("/status/phase").and_then(Value::as_str) == Some("Completed"))
                    .then_some(v),
            )
        },
    )
    .await?;
    println!("{}", serde_json::to_string_pretty(&crr["status"])?);
    Ok(())
}
