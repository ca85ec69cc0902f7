//! etcd, kube-apiserver and (with the controllers a test needs) kube-controller-manager, and
//! kube-scheduler for tests with Deployments, of one release, on loopback, with the authorization a production cluster has (Node and RBAC, the
//! NodeRestriction admission plugin), x509 client certificates for nodes and agents, a token
//! for the administrator, and an audit log of every request (who asked what).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::Value;

use crate::binaries::Binaries;
use crate::pki::{Ca, Credential, signing_key_pem};
use crate::process::Component;

#[derive(Debug, Clone)]
pub struct ControlPlaneConfig {
    /// "1.36" or "1.32" (a module under tests/kube).
    pub release: String,
    /// kube-controller-manager's `--controllers`; empty: no controller-manager.
    pub controllers: Vec<String>,
    /// `--feature-gates` of the apiserver and the controller-manager (e.g.
    /// "InPlacePodVerticalScaling=true").
    pub feature_gates: Vec<String>,
    /// Run kube-scheduler (pods made without a node, by a Deployment's ReplicaSet).
    pub scheduler: bool,
}

impl ControlPlaneConfig {
    /// What most tests need: namespaces get their `default` ServiceAccount and
    /// `kube-root-ca.crt`, deleted owners' dependents are collected, deleted namespaces go, and
    /// admission policies get their type-checking status.
    pub fn new(release: &str) -> ControlPlaneConfig {
        ControlPlaneConfig {
            release: release.to_string(),
            controllers: [
                "serviceaccount-controller",
                "root-ca-certificate-publisher-controller",
                "garbage-collector-controller",
                "namespace-controller",
                "validatingadmissionpolicy-status-controller",
            ]
            .map(String::from)
            .to_vec(),
            feature_gates: Vec::new(),
            scheduler: false,
        }
    }

    /// With what Deployments need: their controllers and the scheduler, which places the pods
    /// a ReplicaSet makes.
    pub fn with_deployments(mut self) -> ControlPlaneConfig {
        for controller in ["deployment-controller", "replicaset-controller"] {
            self.controllers.push(controller.to_string());
        }
        self.scheduler = true;
        self
    }

    /// With what kubelets rotating their client certificates need (`NodeConfig`'s
    /// `rotate_client_certificate_after`): the controllers that approve and sign their CSRs.
    /// The RBAC binding that lets nodes ask for their own is the test's to apply, as kubeadm
    /// does (`SELF_NODE_CLIENT_BINDING`).
    pub fn with_kubelet_certificate_rotation(mut self) -> ControlPlaneConfig {
        for controller in [
            "certificatesigningrequest-approving-controller",
            "certificatesigningrequest-signing-controller",
        ] {
            self.controllers.push(controller.to_string());
        }
        self
    }
}

/// The binding kubeadm makes (`kubeadm:node-autoapprove-certificate-rotation`): every node may
/// ask for a renewal of its own client certificate, which the approving controller then approves.
pub const SELF_NODE_CLIENT_BINDING: &str = r#"{
  "apiVersion": "rbac.authorization.k8s.io/v1",
  "kind": "ClusterRoleBinding",
  "metadata": {"name": "inplaced-test:node-autoapprove-certificate-rotation"},
  "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
              "name": "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient"},
  "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}]
}"#;

pub struct ControlPlane {
    binaries: Binaries,
    // Dropped in reverse order of start: the scheduler, the controller-manager, the apiserver,
    // then etcd.
    // Held for its drop, which ends the process.
    #[allow(dead_code)]
    scheduler: Option<Component>,
    controller_manager: Option<Component>,
    apiserver: Component,
    etcd: Component,
    pub ca: Ca,
    /// https://127.0.0.1:PORT
    pub url: String,
    admin_kubeconfig: PathBuf,
    audit_log: PathBuf,
    dir: tempfile::TempDir,
}

/// A free loopback port for a component to listen on (checked by binding it, then released:
/// the component binds it right after). Picked below the kernel's ephemeral range: a port the
/// kernel hands out for bind(0) is one it also hands out as the local port of outgoing
/// connections, and one of those (a kubelet's, an apiserver's) took such a port between the
/// check and etcd's bind ("address already in use"). Never one this process handed out before.
pub fn free_port() -> anyhow::Result<u16> {
    static HANDED_OUT: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let ephemeral_from = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let (low, high) = (10_000u16, ephemeral_from.max(10_001));
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..1000 {
        let port = low + rand::random::<u16>() % (high - low);
        if !handed_out.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            handed_out.insert(port);
            return Ok(port);
        }
    }
    anyhow::bail!("no free loopback port between {low} and {high}")
}

/// Who authenticates how in a kubeconfig.
enum Identity<'a> {
    Token(&'a str),
    Certificate(&'a Credential),
    /// Certificate and key in one PEM file, read from disk (the kubelet's
    /// `kubelet-client-current.pem`, which its certificate manager re-links when it rotates).
    CertificateFile(&'a Path),
}

impl ControlPlane {
    pub async fn start(config: ControlPlaneConfig) -> anyhow::Result<ControlPlane> {
        let binaries = Binaries::of(&config.release)?;
        // etcd is built once, in the 1.32 module (the 3.5 line 1.32 requires); 1.36's apiserver
        // works with it too.
        let etcd_binaries = Binaries::of(crate::BEFORE_RESIZE_BETA)?;
        let dir = tempfile::Builder::new()
            .prefix("inplaced-kube-")
            .tempdir()
            .context("control plane directory")?;
        let path = |name: &str| dir.path().join(name);

        let ca = Ca::new("inplaced-test-cluster-ca")?;
        let serving = ca.serving(
            "kube-apiserver",
            &[
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
            ],
            &["127.0.0.1", "10.96.0.1"],
        )?;
        std::fs::write(path("ca.crt"), ca.cert_pem())?;
        std::fs::write(path("ca.key"), ca.key_pem())?;
        std::fs::write(path("apiserver.crt"), &serving.cert_pem)?;
        std::fs::write(path("apiserver.key"), &serving.key_pem)?;
        let (signing_key, verifying_key) = signing_key_pem()?;
        std::fs::write(path("service-accounts.key"), signing_key)?;
        std::fs::write(path("service-accounts.pub"), verifying_key)?;
        let admin_token = format!("admin-{:016x}", rand::random::<u64>());
        std::fs::write(
            path("tokens.csv"),
            format!("{admin_token},admin,admin-uid,\"system:masters\"\n"),
        )?;
        // Metadata of every request but the apiserver's own loopback calls: who, verb, what,
        // and the answer's code, for the tests that count the agent's requests.
        std::fs::write(
            path("audit-policy.yaml"),
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\n\
             rules:\n- level: None\n  users: [\"system:apiserver\"]\n- level: Metadata\n",
        )?;

        let etcd_client = format!("http://127.0.0.1:{}", free_port()?);
        let etcd_peer = format!("http://127.0.0.1:{}", free_port()?);
        let mut etcd_command = Command::new(etcd_binaries.path("etcd")?);
        etcd_command
            .arg(format!("--data-dir={}", path("etcd").display()))
            .arg("--name=inplaced-test")
            .arg(format!("--listen-client-urls={etcd_client}"))
            .arg(format!("--advertise-client-urls={etcd_client}"))
            .arg(format!("--listen-peer-urls={etcd_peer}"))
            .arg(format!("--initial-advertise-peer-urls={etcd_peer}"))
            .arg(format!("--initial-cluster=inplaced-test={etcd_peer}"))
            // A test's data is thrown away at the end: no fsync on every write.
            .arg("--unsafe-no-fsync")
            .arg("--log-level=warn");
        let mut etcd = Component::spawn("etcd", etcd_command, &path("etcd.log"))?;

        let port = free_port()?;
        let url = format!("https://127.0.0.1:{port}");
        let mut apiserver_command = Command::new(binaries.path("kube-apiserver")?);
        apiserver_command
            .arg(format!("--etcd-servers={etcd_client}"))
            .arg("--bind-address=127.0.0.1")
            .arg("--advertise-address=127.0.0.1")
            .arg(format!("--secure-port={port}"))
            .arg(format!(
                "--tls-cert-file={}",
                path("apiserver.crt").display()
            ))
            .arg(format!(
                "--tls-private-key-file={}",
                path("apiserver.key").display()
            ))
            .arg(format!("--client-ca-file={}", path("ca.crt").display()))
            .arg(format!(
                "--token-auth-file={}",
                path("tokens.csv").display()
            ))
            .arg("--authorization-mode=Node,RBAC")
            .arg("--enable-admission-plugins=NodeRestriction")
            .arg("--service-cluster-ip-range=10.96.0.0/16")
            .arg("--service-account-issuer=https://kubernetes.default.svc")
            .arg(format!(
                "--service-account-key-file={}",
                path("service-accounts.pub").display()
            ))
            .arg(format!(
                "--service-account-signing-key-file={}",
                path("service-accounts.key").display()
            ))
            // No `kubernetes` Service endpoints to keep for a one-machine control plane.
            .arg("--endpoint-reconciler-type=none")
            .arg("--allow-privileged=true")
            .arg(format!(
                "--audit-policy-file={}",
                path("audit-policy.yaml").display()
            ))
            .arg(format!("--audit-log-path={}", path("audit.log").display()))
            .arg("--audit-log-format=json")
            .arg("--audit-log-mode=blocking")
            .arg("--profiling=false")
            .arg("--v=1");
        if !config.feature_gates.is_empty() {
            apiserver_command.arg(format!(
                "--feature-gates={}",
                config.feature_gates.join(",")
            ));
        }
        let mut apiserver = Component::spawn(
            "kube-apiserver",
            apiserver_command,
            &path("kube-apiserver.log"),
        )?;

        write_kubeconfig(
            &path("admin.kubeconfig"),
            &url,
            &ca.cert_pem(),
            Identity::Token(&admin_token),
        )?;
        let admin_kubeconfig = path("admin.kubeconfig");
        let client = client_from(&admin_kubeconfig).await?;
        let started = std::time::Instant::now();
        apiserver
            .wait_for("kube-apiserver /readyz", Duration::from_secs(120), || {
                let client = client.clone();
                let etcd_running = etcd.check_running();
                async move {
                    etcd_running?;
                    let request = http::Request::get("/readyz").body(Vec::new())?;
                    Ok(client
                        .request_text(request)
                        .await
                        .ok()
                        .filter(|t| t == "ok"))
                }
            })
            .await?;
        eprintln!(
            "real-cluster: kube-apiserver {} ready in {:.1} s ({})",
            binaries.version(),
            started.elapsed().as_secs_f64(),
            dir.path().display()
        );

        let controller_manager = if config.controllers.is_empty() {
            None
        } else {
            let mut command = Command::new(binaries.path("kube-controller-manager")?);
            command
                .arg(format!("--kubeconfig={}", admin_kubeconfig.display()))
                .arg(format!("--controllers={}", config.controllers.join(",")))
                .arg("--leader-elect=false")
                .arg(format!("--root-ca-file={}", path("ca.crt").display()))
                .arg(format!(
                    "--cluster-signing-cert-file={}",
                    path("ca.crt").display()
                ))
                .arg(format!(
                    "--cluster-signing-key-file={}",
                    path("ca.key").display()
                ))
                .arg("--secure-port=0")
                .arg("--v=1");
            if !config.feature_gates.is_empty() {
                command.arg(format!(
                    "--feature-gates={}",
                    config.feature_gates.join(",")
                ));
            }
            Some(Component::spawn(
                "kube-controller-manager",
                command,
                &path("kube-controller-manager.log"),
            )?)
        };

        let scheduler = if config.scheduler {
            let mut command = Command::new(binaries.path("kube-scheduler")?);
            command
                .arg(format!("--kubeconfig={}", admin_kubeconfig.display()))
                .arg("--leader-elect=false")
                .arg("--secure-port=0")
                .arg("--v=1");
            Some(Component::spawn(
                "kube-scheduler",
                command,
                &path("kube-scheduler.log"),
            )?)
        } else {
            None
        };

        let audit_log = path("audit.log");
        Ok(ControlPlane {
            binaries,
            scheduler,
            controller_manager,
            apiserver,
            etcd,
            ca,
            url,
            admin_kubeconfig,
            audit_log,
            dir,
        })
    }

    /// The exact version of the running components, e.g. `v1.36.3`.
    pub fn version(&self) -> &str {
        self.binaries.version()
    }

    pub fn binaries(&self) -> &Binaries {
        &self.binaries
    }

    /// The control plane's working directory (certificates, kubeconfigs, logs, etcd's data).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The administrator's kubeconfig (a token in `system:masters`).
    pub fn admin_kubeconfig(&self) -> &Path {
        &self.admin_kubeconfig
    }

    pub async fn admin_client(&self) -> anyhow::Result<kube::Client> {
        client_from(&self.admin_kubeconfig).await
    }

    /// A kubeconfig for a client certificate of `user` in `group`, written to the control
    /// plane's directory as `<file>`.
    pub fn kubeconfig_for(
        &self,
        file: &str,
        user: &str,
        group: Option<&str>,
    ) -> anyhow::Result<PathBuf> {
        let credential = self.ca.client(user, group)?;
        self.kubeconfig_with(file, &credential)
    }

    /// A kubeconfig for `credential`, written to the control plane's directory as `<file>`.
    pub fn kubeconfig_with(&self, file: &str, credential: &Credential) -> anyhow::Result<PathBuf> {
        let path = self.dir.path().join(file);
        write_kubeconfig(
            &path,
            &self.url,
            &self.ca.cert_pem(),
            Identity::Certificate(credential),
        )?;
        Ok(path)
    }

    /// A kubeconfig whose client certificate and key are the PEM file `pem` (both in one, as
    /// kubeadm's kubelet.conf points at `kubelet-client-current.pem`).
    pub fn kubeconfig_with_file(&self, file: &str, pem: &Path) -> anyhow::Result<PathBuf> {
        let path = self.dir.path().join(file);
        write_kubeconfig(
            &path,
            &self.url,
            &self.ca.cert_pem(),
            Identity::CertificateFile(pem),
        )?;
        Ok(path)
    }

    /// kubectl of the newest release, as the administrator.
    pub fn kubectl(&self) -> anyhow::Result<Command> {
        let kubectl = Binaries::of(crate::NEWEST)?.path("kubectl")?;
        let mut command = Command::new(kubectl);
        command.arg(format!("--kubeconfig={}", self.admin_kubeconfig.display()));
        Ok(command)
    }

    /// Runs kubectl with `args` as the administrator; its stdout, or an error with its stderr.
    pub fn kubectl_run(&self, args: &[&str]) -> anyhow::Result<String> {
        let output = self
            .kubectl()?
            .args(args)
            .output()
            .context("running kubectl")?;
        if !output.status.success() {
            bail!(
                "kubectl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// Every audit event so far (JSON lines), in the order the apiserver logged them.
    pub fn audit_events(&self) -> anyhow::Result<Vec<Value>> {
        let text = std::fs::read_to_string(&self.audit_log).unwrap_or_default();
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).context("an audit line"))
            .collect()
    }

    /// An error with the log tails of any component that has exited.
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        self.etcd.check_running()?;
        self.apiserver.check_running()?;
        if let Some(cm) = &mut self.controller_manager {
            cm.check_running()?;
        }
        Ok(())
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        // Kept for a look after a failure: INPLACED_TEST_KEEP_CLUSTER=1 keeps the directory.
        if std::env::var_os("INPLACED_TEST_KEEP_CLUSTER").is_some() {
            let kept = std::mem::replace(&mut self.dir, tempfile::tempdir().expect("tempdir"));
            eprintln!("real-cluster: kept {}", kept.keep().display());
        }
        if let Some(cm) = &mut self.controller_manager {
            cm.stop(Duration::from_secs(10));
        }
        self.apiserver.stop(Duration::from_secs(20));
        self.etcd.stop(Duration::from_secs(10));
    }
}

/// A kube client for `kubeconfig`, with the timeouts of the project's own clients.
pub async fn client_from(kubeconfig: &Path) -> anyhow::Result<kube::Client> {
    let text = std::fs::read_to_string(kubeconfig)?;
    let parsed = kube::config::Kubeconfig::from_yaml(&text)?;
    let config =
        kube::Config::from_custom_kubeconfig(parsed, &kube::config::KubeConfigOptions::default())
            .await?;
    Ok(kube::Client::try_from(config)?)
}

fn write_kubeconfig(
    path: &Path,
    url: &str,
    ca_pem: &str,
    identity: Identity,
) -> anyhow::Result<()> {
    let user = match identity {
        Identity::Token(token) => serde_json::json!({ "token": token }),
        Identity::Certificate(credential) => serde_json::json!({
            "client-certificate-data": BASE64.encode(&credential.cert_pem),
            "client-key-data": BASE64.encode(&credential.key_pem),
        }),
        Identity::CertificateFile(pem) => serde_json::json!({
            "client-certificate": pem,
            "client-key": pem,
        }),
    };
    let kubeconfig = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": {
            "server": url,
            "certificate-authority-data": BASE64.encode(ca_pem),
        }}],
        "users": [{"name": "test", "user": user}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
        "current-context": "test",
    });
    // JSON is YAML: every client reads it.
    std::fs::write(path, serde_json::to_vec_pretty(&kubeconfig)?)
        .with_context(|| format!("writing {}", path.display()))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(())
}
