//! Several nodes on one API double: each with its own kubelet stand-in (on the one real
//! containerd; every stand-in runs only the pods bound to its node), its own CRI proxy and its
//! own agent, which authenticates as that node's dedicated identity (user inplaced:node:<node>,
//! group inplaced:agents) under the shipped admission policy. For what crosses nodes: rollouts
//! carried out by the agents together.

use std::time::Duration;

use apiserver_double::{ApiServer, ServerConfig};
use node_sandbox::{CriProxy, KubeletConfig, KubeletStandIn};
use serde::Deserialize as _;
use serde_json::{Value, json};

use super::agent::AgentProcess;
use super::sandbox::{NS, run_pod_on, wait_stored};
use super::{endpoint, unique};

pub struct ClusterNode {
    pub name: String,
    pub kubelet: Option<KubeletStandIn>,
    pub proxy: CriProxy,
    pub kubeconfig: tempfile::NamedTempFile,
    pub state_dir: tempfile::TempDir,
    pub agent: Option<AgentProcess>,
}

pub struct Cluster {
    pub server: ApiServer,
    pub nodes: Vec<ClusterNode>,
    /// An administrator's client (no admission policy applies to it).
    pub client: ::kube::Client,
}

impl Cluster {
    /// `count` nodes, each with its kubelet stand-in of `kubelet_version` and its agent.
    pub async fn start(count: usize, kubelet_version: &str) -> Cluster {
        let filter = std::env::var("INPLACED_TEST_LOG").unwrap_or_else(|_| "warn".into());
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_test_writer()
            .try_init();
        let server = ApiServer::start(ServerConfig {
            graceful_pod_deletion: true,
            ..Default::default()
        })
        .await
        .unwrap();
        let admin_kubeconfig = server.kubeconfig(None);
        let client = node_sandbox::util::kube_client(&admin_kubeconfig)
            .await
            .unwrap();
        apply_shipped_policy(&server);
        let mut nodes = Vec::new();
        for _ in 0..count {
            let name = unique("node");
            let token = format!("agent-{name}");
            server.tokens().add_with_groups(
                &token,
                &format!("inplaced:node:{name}"),
                &["inplaced:agents"],
                None,
            );
            let mut kubelet_config =
                KubeletConfig::new(&name, &admin_kubeconfig, &endpoint().to_string());
            kubelet_config.kubelet_version = kubelet_version.to_owned();
            kubelet_config.sync_period = Duration::from_millis(200);
            kubelet_config.restart_delay = Duration::from_millis(500);
            let kubelet = KubeletStandIn::start(kubelet_config).await.unwrap();
            let proxy_dir = tempfile::tempdir().unwrap().keep();
            let proxy = CriProxy::start(&proxy_dir, &endpoint().to_string())
                .await
                .unwrap();
            let kubeconfig = tempfile::NamedTempFile::new().unwrap();
            server
                .write_kubeconfig(kubeconfig.path(), Some(&token))
                .unwrap();
            nodes.push(ClusterNode {
                name,
                kubelet: Some(kubelet),
                proxy,
                kubeconfig,
                state_dir: tempfile::tempdir().unwrap(),
                agent: None,
            });
        }
        let mut cluster = Cluster {
            server,
            nodes,
            client,
        };
        for i in 0..count {
            cluster.start_agent(i);
        }
        cluster
    }

    /// (Re)starts node `i`'s agent with the same state directory.
    pub fn start_agent(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        drop(node.agent.take());
        let args = [
            "--node-name".to_string(),
            node.name.clone(),
            "--kubeconfig".into(),
            node.kubeconfig.path().display().to_string(),
            "--cri-endpoint".into(),
            node.proxy.endpoint(),
            "--state-dir".into(),
            node.state_dir.path().display().to_string(),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let agent = AgentProcess::start(&args, None);
        agent.wait_http("/readyz", 200, Duration::from_secs(30));
        node.agent = Some(agent);
    }

    /// Ends node `i`'s agent with SIGKILL (no shutdown of any kind).
    pub fn kill_agent(&mut self, i: usize) {
        if let Some(agent) = self.nodes[i].agent.as_mut() {
            agent.signal(nix::sys::signal::Signal::SIGKILL);
            agent.wait_exit(Duration::from_secs(10));
        }
        self.nodes[i].agent = None;
    }

    /// A pod on node `i` with `labels` (host network, grace 5 s), waited for until every
    /// container runs.
    pub async fn run_pod(&self, i: usize, name: &str, labels: Value, spec: Value) -> Value {
        let metadata = json!({"labels": labels});
        run_pod_on(&self.server, &self.nodes[i].name, name, metadata, spec).await
    }

    pub fn pod(&self, name: &str) -> Option<Value> {
        self.server.store().get("pods", NS, name)
    }

    pub async fn wait_pod(
        &self,
        name: &str,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        wait_stored(&self.server, "pods", name, timeout, pred).await
    }

    pub async fn stop(mut self) {
        for node in &mut self.nodes {
            drop(node.agent.take());
            if let Some(kubelet) = node.kubelet.take() {
                kubelet.stop().await.unwrap();
            }
        }
    }
}

/// The shipped ValidatingAdmissionPolicies and bindings, stored as `kubectl apply` would.
pub fn apply_shipped_policy(server: &ApiServer) {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/packaging/kubernetes/admission-policy.yaml"
    ))
    .unwrap();
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let doc = Value::deserialize(doc).unwrap();
        if doc.is_null() {
            continue;
        }
        let resource = match doc["kind"].as_str() {
            Some("ValidatingAdmissionPolicy") => apiserver_double::VALIDATING_ADMISSION_POLICIES,
            Some("ValidatingAdmissionPolicyBinding") => {
                apiserver_double::VALIDATING_ADMISSION_POLICY_BINDINGS
            }
            other => panic!("unexpected document {other:?}"),
        };
        server.store().create(resource, doc).unwrap();
    }
}
