//! The real kruise-manager (OpenKruise v1.9.0) outside the cluster, as the control plane half of
//! kruise with no kruise-daemon: the tests' agent is the node half.
//!
//! Its webhooks cannot be turned off (its controllers start only once the webhook server is
//! healthy), so it gets kruise's own webhook configurations, each webhook scoped to the
//! namespaces labelled [`WEBHOOK_NAMESPACE_LABEL`] (every kruise webhook fails closed: unscoped,
//! a stopped manager would block every pod in the cluster), and with `WEBHOOK_HOST` on loopback
//! it points them at its own URL with a certificate it makes.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};
use serde::Deserialize as _;
use serde_json::{Value, json};

use crate::binaries::Binaries;
use crate::control_plane::{ControlPlane, free_port};
use crate::process::Component;

/// The label (value `on`) of the namespaces kruise's webhooks act in.
pub const WEBHOOK_NAMESPACE_LABEL: &str = "inplaced.io/kruise-webhooks";
const NAMESPACE: &str = "kruise-system";
const CONFIGURATIONS: [(&str, &str); 2] = [
    (
        "MutatingWebhookConfiguration",
        "kruise-mutating-webhook-configuration",
    ),
    (
        "ValidatingWebhookConfiguration",
        "kruise-validating-webhook-configuration",
    ),
];

pub struct KruiseManager {
    manager: Component,
    kubectl: Command,
    dir: PathBuf,
}

impl KruiseManager {
    /// Applies kruise's CRDs and webhook configurations and starts kruise-manager with
    /// `feature_gates` (e.g. "InPlaceUpdateEnvFromMetadata=true"); returns once its webhooks
    /// answer and its controllers run.
    pub async fn start(
        cluster: &ControlPlane,
        feature_gates: &[&str],
    ) -> anyhow::Result<KruiseManager> {
        let binaries = Binaries::of(crate::BEFORE_RESIZE_BETA)?;
        let dir = cluster.dir().join("kruise");
        std::fs::create_dir_all(&dir)?;
        cluster.kubectl_run(&[
            "apply",
            "--server-side",
            &format!("-f={}", binaries.dir().join("kruise-crds").display()),
        ])?;
        cluster.kubectl_run(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd",
            "--all",
        ])?;
        // As kruise's kustomization does: its conversion webhook for the CRDs it names (the
        // manager then points them at itself). Without it a read in a version other than the
        // stored one (kruise 1.9 stores v1beta1) is the stored object with fields pruned.
        for patch in std::fs::read_dir(binaries.dir().join("kruise-crd-patches"))? {
            let patch = patch?.path();
            let text = std::fs::read_to_string(&patch)?;
            let document =
                serde_json::to_value(serde_yaml_ng::from_str::<serde_yaml_ng::Value>(&text)?)?;
            let name = document["metadata"]["name"]
                .as_str()
                .with_context(|| format!("{}: no CRD name", patch.display()))?;
            let conversion = json!({"spec": {"conversion": document["spec"]["conversion"]}});
            cluster.kubectl_run(&[
                "patch",
                "crd",
                name,
                "--type=merge",
                &format!("-p={conversion}"),
            ])?;
        }
        if cluster
            .kubectl_run(&["get", "namespace", NAMESPACE])
            .is_err()
        {
            cluster.kubectl_run(&["create", "namespace", NAMESPACE])?;
        }
        let configurations = dir.join("webhook-configurations.json");
        std::fs::write(
            &configurations,
            serde_json::to_vec(&scoped_configurations(
                &binaries.dir().join("kruise-webhooks.yaml"),
            )?)?,
        )?;
        cluster.kubectl_run(&[
            "apply",
            "--server-side",
            &format!("-f={}", configurations.display()),
        ])?;

        let health = free_port()?;
        let mut command = Command::new(binaries.path("kruise-manager")?);
        command
            .env("KUBECONFIG", cluster.admin_kubeconfig())
            .env("POD_NAMESPACE", NAMESPACE)
            .env("WEBHOOK_HOST", "127.0.0.1")
            .env("WEBHOOK_PORT", free_port()?.to_string())
            .env("WEBHOOK_CERT_DIR", dir.join("certs"))
            .arg("--enable-leader-election=false")
            .arg("--enable-pprof=false")
            .arg(format!("--metrics-addr=127.0.0.1:{}", free_port()?))
            .arg(format!("--health-probe-addr=127.0.0.1:{health}"))
            .arg("--v=2");
        if !feature_gates.is_empty() {
            command.arg(format!("--feature-gates={}", feature_gates.join(",")));
        }
        let mut manager = Component::spawn(
            "kruise-manager",
            command,
            &cluster.dir().join("kruise-manager.log"),
        )?;
        let started = std::time::Instant::now();
        manager
            .wait_for("kruise-manager ready", Duration::from_secs(120), || {
                ready_on(health)
            })
            .await?;
        eprintln!(
            "real-cluster: kruise-manager v1.9.0 ready in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        let mut kubectl = cluster.kubectl()?;
        kubectl.args(["delete", "--ignore-not-found", "--wait=false"]);
        for (kind, name) in CONFIGURATIONS {
            kubectl.arg(format!("{}/{name}", kind.to_lowercase()));
        }
        Ok(KruiseManager {
            manager,
            kubectl,
            dir,
        })
    }

    pub fn log_tail(&self, lines: usize) -> String {
        self.manager.log_tail(lines)
    }

    /// The manager's working directory (its webhook certificates).
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }
}

impl Drop for KruiseManager {
    fn drop(&mut self) {
        // The configurations go first: a webhook that fails closed, with nobody answering it,
        // would block what it matches.
        let _ = self.kubectl.output();
        self.manager.stop(Duration::from_secs(10));
    }
}

/// /readyz of the manager's health probe server: its webhook server is up and its informers
/// synced.
async fn ready_on(port: u16) -> anyhow::Result<Option<()>> {
    Ok(answers_ready(port).await.then_some(()))
}

async fn answers_ready(port: u16) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut stream) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
        return false;
    };
    if stream
        .write_all(b"GET /readyz HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .await
        .is_err()
    {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer).await;
    answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200")
}

/// kruise's webhook configurations (config/webhook/manifests.yaml) under the names the manager
/// keeps up to date, every webhook limited to the labelled namespaces.
fn scoped_configurations(manifests: &std::path::Path) -> anyhow::Result<Value> {
    let text =
        std::fs::read_to_string(manifests).with_context(|| format!("{}", manifests.display()))?;
    let mut items = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(&text) {
        let mut document = serde_json::to_value(serde_yaml_ng::Value::deserialize(document)?)?;
        if document.is_null() {
            continue;
        }
        let kind = document["kind"].as_str().unwrap_or_default().to_string();
        let Some((_, name)) = CONFIGURATIONS.iter().find(|(k, _)| *k == kind) else {
            bail!("{}: unexpected {kind}", manifests.display());
        };
        document["metadata"] = json!({ "name": name });
        for webhook in document["webhooks"].as_array_mut().into_iter().flatten() {
            webhook["namespaceSelector"] =
                json!({ "matchLabels": { WEBHOOK_NAMESPACE_LABEL: "on" } });
        }
        items.push(document);
    }
    Ok(json!({ "apiVersion": "v1", "kind": "List", "items": items }))
}
