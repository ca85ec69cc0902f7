//! A real node: a kubelet of one release on a containerd of its own (one socket, root, state,
//! runc root and cgroup parent per node, through tests/node/containerd.sh), registered with a
//! [`ControlPlane`] under its node identity (`system:node:<name>`, group `system:nodes`).
//!
//! Each node gets its own containerd because a kubelet owns its runtime: it stops every pod
//! sandbox it does not know, so it must never share the suite's containerd.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::binaries::Binaries;
use crate::control_plane::{ControlPlane, free_port};
use crate::process::{Component, wait_until};

#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub name: String,
    /// The kubelet's release ("1.36", "1.32").
    pub release: String,
    /// The containerd release (tests/node/containerd.sh: 1.6, 1.7, 2.1).
    pub containerd: String,
    /// The kubelet's feature gates, e.g. ("InPlacePodVerticalScaling", false).
    pub feature_gates: Vec<(String, bool)>,
    /// When set, the kubelet's first client certificate lasts this long from its start, and the
    /// kubelet rotates it itself through a CertificateSigningRequest (`rotateCertificates`), as
    /// kubeadm's nodes do: its kubeconfig names `kubelet-client-current.pem` in its cert dir,
    /// which its certificate manager re-links to each new certificate. The control plane must
    /// then run the CSR approving and signing controllers, and the group `system:nodes` be
    /// bound to `…:selfnodeclient` (see `ControlPlaneConfig::with_kubelet_certificate_rotation`).
    pub rotate_client_certificate_after: Option<std::time::Duration>,
}

impl NodeConfig {
    pub fn new(name: &str, release: &str) -> NodeConfig {
        NodeConfig {
            name: name.to_string(),
            release: release.to_string(),
            containerd: "1.6".into(),
            feature_gates: Vec::new(),
            rotate_client_certificate_after: None,
        }
    }
}

/// Host sysctls the kubelet sets at start (unless protectKernelDefaults, which would instead
/// refuse to start on a host that differs): put back when the node goes.
const KUBELET_SYSCTLS: &[&str] = &[
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
];

pub struct RealNode {
    pub name: String,
    /// The node IP: a /32 of the benchmarking range 198.18.0.0/15 (RFC 2544) on `lo`: the
    /// kubelet refuses a loopback node IP, and traffic to an address on `lo` stays on the machine.
    pub ip: String,
    config: NodeConfig,
    binaries: Binaries,
    /// Which of the machine's node slots (see `claim_slot`).
    slot: u8,
    base: PathBuf,
    cgroup_root: String,
    kubelet: Option<Component>,
    kubelet_kubeconfig: PathBuf,
    /// The kubelet's log, in the control plane's directory (kept with it for a look after a
    /// failure; the node's own directory goes with its containerd).
    kubelet_log: PathBuf,
    /// The CRI endpoint of the node's containerd (unix://...).
    pub cri_endpoint: String,
    sysctls: Vec<(String, String)>,
    address_added: bool,
}

fn containerd_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../node/containerd.sh")
}

impl RealNode {
    pub async fn start(
        control_plane: &ControlPlane,
        config: NodeConfig,
    ) -> anyhow::Result<RealNode> {
        let binaries = Binaries::of(&config.release)?;
        let (index, base) = claim_slot()?;
        let cgroup_root = format!("inplaced-kube-{index}");
        let ip = format!("198.18.0.{}", 10 + index);
        let sysctls = KUBELET_SYSCTLS
            .iter()
            .filter_map(|key| {
                let value = std::fs::read_to_string(format!("/proc/sys/{key}")).ok()?;
                Some((key.to_string(), value.trim().to_string()))
            })
            .collect();
        let mut node = RealNode {
            name: config.name.clone(),
            ip: ip.clone(),
            binaries,
            slot: index,
            base,
            cgroup_root,
            kubelet: None,
            kubelet_kubeconfig: PathBuf::new(),
            kubelet_log: control_plane
                .dir()
                .join(format!("kubelet-{}.log", config.name)),
            cri_endpoint: String::new(),
            sysctls,
            address_added: false,
            config,
        };
        // From here on Drop undoes whatever was done.
        node.cri_endpoint = node
            .containerd("up")?
            .trim()
            .lines()
            .last()
            .unwrap_or("")
            .to_string();
        if !node.cri_endpoint.starts_with("unix://") {
            bail!(
                "containerd.sh up printed no endpoint: {:?}",
                node.cri_endpoint
            );
        }
        // The slot is ours, so an address of it already on `lo` is a leftover of a run that
        // was killed before its clean-up: taken over (and removed with the node).
        let listed = Command::new("ip")
            .args(["-o", "address", "show", "dev", "lo"])
            .output()
            .context("ip address show")?;
        let present = String::from_utf8_lossy(&listed.stdout).contains(&format!(" {ip}/32 "));
        if !present {
            let added = Command::new("ip")
                .args(["address", "add", &format!("{ip}/32"), "dev", "lo"])
                .output()
                .context("ip address add")?;
            if !added.status.success() {
                bail!(
                    "ip address add {ip}/32 dev lo: {}",
                    String::from_utf8_lossy(&added.stderr)
                );
            }
        }
        node.address_added = true;
        // The kubelet refuses a cgroup root that does not exist yet in every hierarchy.
        for hierarchy in cgroup_hierarchies() {
            std::fs::create_dir_all(hierarchy.join(&node.cgroup_root))
                .with_context(|| format!("creating the cgroup root in {}", hierarchy.display()))?;
        }
        let user = format!("system:node:{}", node.name);
        let kubeconfig = format!("kubelet-{}.kubeconfig", node.name);
        node.kubelet_kubeconfig = match node.config.rotate_client_certificate_after {
            None => control_plane.kubeconfig_for(&kubeconfig, &user, Some("system:nodes"))?,
            Some(life) => {
                // The certificate manager's file store: a "current" that is not a link is a
                // file it refuses to replace, so the first certificate is linked too.
                let pki = node.base.join("kubelet-pki");
                std::fs::create_dir_all(&pki)?;
                let first = control_plane
                    .ca
                    .client_from_now(&user, Some("system:nodes"), life)?;
                let first_file = pki.join("kubelet-client-first.pem");
                std::fs::write(&first_file, format!("{}{}", first.cert_pem, first.key_pem))?;
                let current = pki.join("kubelet-client-current.pem");
                std::os::unix::fs::symlink(&first_file, &current)?;
                control_plane.kubeconfig_with_file(&kubeconfig, &current)?
            }
        };
        std::fs::write(node.base.join("ca.crt"), control_plane.ca.cert_pem())?;
        node.write_kubelet_config()?;
        node.start_kubelet()?;
        node.wait_registered(control_plane).await?;
        Ok(node)
    }

    /// Runs tests/node/containerd.sh ACTION for this node's containerd; its stdout.
    fn containerd(&self, action: &str) -> anyhow::Result<String> {
        let output = Command::new(containerd_script())
            .arg(action)
            .env("INPLACED_TEST_CRI_BASE", &self.base)
            .env("INPLACED_TEST_CGROUP_ROOT", &self.cgroup_root)
            .env("INPLACED_CONTAINERD", &self.config.containerd)
            .output()
            .context("running tests/node/containerd.sh")?;
        if !output.status.success() {
            bail!(
                "containerd.sh {action} for node {}: {}",
                self.name,
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    fn minor(&self) -> u32 {
        self.config
            .release
            .split('.')
            .nth(1)
            .and_then(|m| m.parse().ok())
            .unwrap_or(0)
    }

    fn write_kubelet_config(&self) -> anyhow::Result<()> {
        let gates: serde_json::Map<String, Value> = self
            .config
            .feature_gates
            .iter()
            .map(|(gate, on)| (gate.clone(), json!(on)))
            .collect();
        let mut config = json!({
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": self.ip,
            "port": free_port()?,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": free_port()?,
            "containerRuntimeEndpoint": self.cri_endpoint,
            // No systemd as PID 1 here.
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": format!("/{}", self.cgroup_root),
            "failSwapOn": false,
            "authentication": {
                "anonymous": {"enabled": false},
                "webhook": {"enabled": false},
                "x509": {"clientCAFile": self.base.join("ca.crt")},
            },
            "authorization": {"mode": "AlwaysAllow"},
            // A test machine's disk and memory must not make the kubelet evict or collect.
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {
                "memory.available": "1Mi",
                "nodefs.available": "1%",
                "nodefs.inodesFree": "1%",
                "imagefs.available": "1%",
            },
            "podLogsDir": self.base.join("pod-logs"),
            "resolvConf": "/etc/resolv.conf",
            "serializeImagePulls": true,
            "featureGates": gates,
        });
        if self.config.rotate_client_certificate_after.is_some() {
            config["rotateCertificates"] = json!(true);
        }
        // 1.31+ refuses cgroup v1 unless told not to; this machine mounts v1 hierarchies.
        if self.minor() >= 31 {
            config["failCgroupV1"] = json!(false);
        }
        std::fs::write(
            self.base.join("kubelet.json"),
            serde_json::to_vec_pretty(&config)?,
        )?;
        Ok(())
    }

    /// The kubelet's process name (`comm`): `kubelet-N` for slot N. Several kubelets share this
    /// machine, where a node has one; the agent finds its node's kubelet by this name
    /// (`--kubelet-process-name`).
    pub fn kubelet_process_name(&self) -> String {
        format!("kubelet-{}", self.slot)
    }

    /// Starts the kubelet (again, after [`RealNode::stop_kubelet`]), through a link named after
    /// the node's slot (its process name).
    pub fn start_kubelet(&mut self) -> anyhow::Result<()> {
        let link = self.base.join(self.kubelet_process_name());
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(self.binaries.path("kubelet")?, &link)
            .with_context(|| format!("linking {}", link.display()))?;
        let mut command = Command::new(&link);
        command
            .arg(format!(
                "--config={}",
                self.base.join("kubelet.json").display()
            ))
            .arg(format!(
                "--kubeconfig={}",
                self.kubelet_kubeconfig.display()
            ))
            .arg(format!("--hostname-override={}", self.name))
            .arg(format!("--node-ip={}", self.ip))
            .arg(format!(
                "--root-dir={}",
                self.base.join("kubelet").display()
            ))
            .arg(format!(
                "--cert-dir={}",
                self.base.join("kubelet-pki").display()
            ))
            .arg("--v=2");
        self.kubelet = Some(Component::spawn(
            &format!("kubelet {}", self.name),
            command,
            &self.kubelet_log,
        )?);
        Ok(())
    }

    /// Upgrades (or downgrades) the node's kubelet to `release` as an operator does: the old
    /// one stopped, the new one started on the same root directory, containerd and
    /// configuration; returns once the Node object reports the new version.
    pub async fn replace_kubelet(
        &mut self,
        control_plane: &ControlPlane,
        release: &str,
    ) -> anyhow::Result<()> {
        let binaries = Binaries::of(release)?;
        self.stop_kubelet();
        self.binaries = binaries;
        self.config.release = release.to_string();
        self.write_kubelet_config()?;
        self.start_kubelet()?;
        let version = self.binaries.version().to_string();
        let nodes: kube::Api<k8s_openapi::api::core::v1::Node> =
            kube::Api::all(control_plane.admin_client().await?);
        let name = self.name.clone();
        wait_until(
            "the Node object's new kubelet version",
            Duration::from_secs(120),
            || {
                let nodes = nodes.clone();
                let name = name.clone();
                let version = version.clone();
                async move {
                    let node = nodes.get(&name).await?;
                    let now = node
                        .status
                        .and_then(|s| s.node_info)
                        .map(|i| i.kubelet_version)
                        .unwrap_or_default();
                    Ok((now == version).then_some(()))
                }
            },
        )
        .await
    }

    /// The kubelet's root directory (`--root-dir`: pod volumes, checkpoint files).
    pub fn kubelet_root_dir(&self) -> PathBuf {
        self.base.join("kubelet")
    }

    /// The kubelet's configuration file (KubeletConfiguration, JSON).
    pub fn kubelet_config_file(&self) -> PathBuf {
        self.base.join("kubelet.json")
    }

    /// Stops the kubelet (SIGTERM); its containers keep running.
    pub fn stop_kubelet(&mut self) {
        if let Some(mut kubelet) = self.kubelet.take() {
            kubelet.stop(Duration::from_secs(20));
        }
    }

    /// The kubelet's process ID, while it runs.
    pub fn kubelet_pid(&self) -> Option<u32> {
        self.kubelet.as_ref().map(Component::pid)
    }

    pub fn kubelet_log_tail(&self, lines: usize) -> String {
        self.kubelet
            .as_ref()
            .map(|k| k.log_tail(lines))
            .unwrap_or_default()
    }

    async fn wait_registered(&mut self, control_plane: &ControlPlane) -> anyhow::Result<()> {
        let client = control_plane.admin_client().await?;
        let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client);
        let started = std::time::Instant::now();
        let name = self.name.clone();
        let Some(kubelet) = self.kubelet.as_mut() else {
            bail!("the kubelet of node {name} is not running");
        };
        kubelet
            .wait_for(
                "the kubelet's Node object",
                Duration::from_secs(120),
                || {
                    let nodes = nodes.clone();
                    let name = name.clone();
                    async move {
                        let node = nodes.get_opt(&name).await?;
                        Ok(node.filter(|n| {
                            n.status
                                .as_ref()
                                .and_then(|s| s.node_info.as_ref())
                                .is_some_and(|i| !i.kubelet_version.is_empty())
                        }))
                    }
                },
            )
            .await?;
        eprintln!(
            "real-cluster: kubelet {} of node {} registered in {:.1} s (containerd {}, {})",
            self.binaries.version(),
            self.name,
            started.elapsed().as_secs_f64(),
            self.config.containerd,
            self.cri_endpoint
        );
        Ok(())
    }

    /// The kubelet's kubeconfig (the node-bound identity the agent may share).
    /// The kubelet's `--cert-dir` (its client certificates when it rotates them).
    pub fn kubelet_cert_dir(&self) -> PathBuf {
        self.base.join("kubelet-pki")
    }

    pub fn kubelet_kubeconfig(&self) -> &Path {
        &self.kubelet_kubeconfig
    }

    /// The kubelet's exact version, e.g. `v1.32.13`.
    pub fn kubelet_version(&self) -> &str {
        self.binaries.version()
    }

    /// The cgroup parent the kubelet puts pods under (`/<root>/kubepods/...`).
    pub fn cgroup_root(&self) -> &str {
        &self.cgroup_root
    }
}

/// How many real nodes may run on the machine at once.
const SLOTS: u8 = 16;

/// The first free node slot: its directory, made here (so no other test, in this process or
/// another, takes it) and removed with everything in it by `containerd.sh down`. The slot
/// names the node's containerd directory, cgroup root and node IP.
fn claim_slot() -> anyhow::Result<(u8, PathBuf)> {
    for index in 0..SLOTS {
        let base = PathBuf::from(format!("/run/inplaced-kube-{index}"));
        match std::fs::create_dir(&base) {
            Ok(()) => return Ok((index, base)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).with_context(|| format!("creating {}", base.display())),
        }
    }
    bail!(
        "all {SLOTS} real-node slots (/run/inplaced-kube-N) are taken: left over from a crashed run? `INPLACED_TEST_CRI_BASE=/run/inplaced-kube-N tests/node/containerd.sh down` clears one"
    )
}

/// Every mounted cgroup hierarchy's root directory: each v1 controller's, or the one v2 root.
fn cgroup_hierarchies() -> Vec<PathBuf> {
    let base = Path::new("/sys/fs/cgroup");
    if base.join("cgroup.controllers").exists() {
        return vec![base.to_path_buf()];
    }
    std::fs::read_dir(base)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.is_dir() && !p.is_symlink())
                .collect()
        })
        .unwrap_or_default()
}

impl Drop for RealNode {
    fn drop(&mut self) {
        self.stop_kubelet();
        // Every container and sandbox, the daemon, its mounts (the kubelet's root directory,
        // with the pods' volumes, lives under it too) and the cgroups under the node's root.
        if let Err(e) = self.containerd("down") {
            eprintln!("real-cluster: {e:#}");
        }
        if self.address_added {
            let _ = Command::new("ip")
                .args(["address", "del", &format!("{}/32", self.ip), "dev", "lo"])
                .output();
        }
        for (key, value) in &self.sysctls {
            let _ = std::fs::write(format!("/proc/sys/{key}"), value);
        }
        // The kubelet's links in the shared /var/log/containers to this node's pod logs.
        if let Ok(entries) = std::fs::read_dir("/var/log/containers") {
            for entry in entries.filter_map(Result::ok) {
                if std::fs::read_link(entry.path()).is_ok_and(|t| t.starts_with(&self.base)) {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
    }
}
