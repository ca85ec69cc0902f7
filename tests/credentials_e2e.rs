//! Credentials that rotate while the agent runs (issue 50): a client certificate replaced on
//! disk the way the kubelet rotates its own, a token file rewritten, an exec plugin's token
//! refused, a CA bundle replaced. The agent binary talks HTTPS to the API server double, which
//! checks client certificates and token expiry per request as kube-apiserver does, so an agent
//! that kept its first credentials gets 401 (or fails TLS) once they expire. Credentials refused
//! even after being read again make the agent unready, say so once, and are retried.
//!
//! The runtime is not the subject: the agent's CRI endpoint is a socket that does not exist.

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use apiserver_double::{ApiServer, AuditEntry, Credential, ServerConfig, TestCa, TlsSetup};
use serde_json::{Value, json};
use support::agent::AgentProcess;

/// How long a recovery may take: a file check interval (10 s) plus a watch's back-off.
const RECOVERY: Duration = Duration::from_secs(40);

struct Cluster {
    server: ApiServer,
    server_ca: TestCa,
    client_ca: TestCa,
    node: String,
    dir: tempfile::TempDir,
}

impl Cluster {
    async fn start() -> Cluster {
        let server_ca = TestCa::new("serving");
        let client_ca = TestCa::new("clients");
        let server = ApiServer::start(ServerConfig {
            tls: Some(TlsSetup {
                serving: server_ca.serving(Duration::from_secs(3600)),
                client_ca_pem: Some(client_ca.pem()),
            }),
            ..Default::default()
        })
        .await
        .expect("server");
        let node = support::unique("node");
        server
            .store()
            .create(
                "nodes",
                json!({"metadata": {"name": node},
                       "status": {"nodeInfo": {"kubeletVersion": "v1.33.5"}}}),
            )
            .expect("node");
        let dir = tempfile::tempdir().expect("tempdir");
        let cluster = Cluster {
            server,
            server_ca,
            client_ca,
            node,
            dir,
        };
        cluster.write("ca.crt", &cluster.server_ca.pem());
        cluster
    }

    fn user(&self) -> String {
        format!("system:node:{}", self.node)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes a file the way credentials are replaced: a new file renamed over the old one.
    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path(name);
        let staged = self.path(&format!(".{name}.new"));
        std::fs::write(&staged, text).expect("write");
        std::fs::rename(&staged, &path).expect("rename");
        path
    }

    /// The agent with a kubeconfig of `user` fields (CA at `ca.crt`).
    fn agent(&self, user: Value) -> AgentProcess {
        let cluster = json!({"certificate-authority": self.path("ca.crt")});
        let kubeconfig = self.write("kubeconfig", &self.server.kubeconfig_with(cluster, user));
        let no_runtime = format!("unix://{}", self.path("no-containerd.sock").display());
        AgentProcess::start(
            &[
                "--node-name",
                &self.node,
                "--kubeconfig",
                kubeconfig.to_str().expect("utf-8 path"),
                "--cri-endpoint",
                &no_runtime,
            ],
            None,
        )
    }

    fn last_seq(&self) -> u64 {
        self.server.audit().entries().last().map_or(0, |e| e.seq)
    }

    /// Waits for the agent's user to open a watch of pods with success after `seq`.
    async fn watch_served_after(&self, seq: u64, within: Duration) -> Option<AuditEntry> {
        let user = self.user();
        self.server
            .audit()
            .wait_for(within, |e| {
                e.seq > seq
                    && e.request.user == user
                    && e.request.verb == "watch"
                    && e.request.resource == "pods"
                    && e.code == 200
            })
            .await
    }

    /// Makes the agent send new requests: its watches end and connections close.
    async fn end_connections(&self) {
        self.server.faults().outage(Duration::from_millis(300));
        tokio::time::sleep(Duration::from_millis(400)).await;
    }

    /// After the connections end, the agent's user opens a watch again within `within`, and
    /// the agent still runs.
    async fn assert_served_again(&self, agent: &mut AgentProcess, within: Duration, what: &str) {
        let mark = self.last_seq();
        self.end_connections().await;
        let served = self.watch_served_after(mark, within).await;
        assert!(served.is_some(), "{what}:\n{}", agent.log());
        assert_running(agent);
    }

    fn refusals_after(&self, seq: u64) -> usize {
        self.server
            .audit()
            .entries()
            .iter()
            .filter(|e| e.seq > seq && e.code == 401)
            .count()
    }
}

/// The agent is still running and answering.
fn assert_running(agent: &mut AgentProcess) {
    assert_eq!(
        agent.exit_status(),
        None,
        "the agent exited:\n{}",
        agent.log()
    );
    agent.wait_http("/healthz", 200, Duration::from_secs(5));
}

fn unready_reasons(agent: &AgentProcess) -> String {
    agent
        .get("/readyz")
        .map(|(_, body)| body)
        .unwrap_or_default()
}

async fn sleep_until(at: SystemTime) {
    if let Ok(left) = at.duration_since(SystemTime::now()) {
        tokio::time::sleep(left).await;
    }
}

/// A certificate expires on the second after its `notAfter`'s second.
fn past_expiry(valid_for: Duration, issued: SystemTime) -> SystemTime {
    issued + valid_for + Duration::from_secs(2)
}

/// As kubeadm's `kubelet.conf`: certificate and key in one file,
/// `kubelet-client-current.pem`, a link the kubelet points at each new certificate.
fn write_kubelet_pem(dir: &Path, name: &str, credential: &Credential) {
    let file = dir.join(name);
    std::fs::write(
        &file,
        format!("{}{}", credential.cert_pem, credential.key_pem),
    )
    .expect("write pem");
    let link = dir.join("kubelet-client-current.pem");
    let staged = dir.join(".kubelet-client-current.pem.new");
    std::os::unix::fs::symlink(&file, &staged).expect("symlink");
    std::fs::rename(&staged, &link).expect("swap link");
}

#[tokio::test]
async fn a_client_certificate_rotated_on_disk_is_used_before_the_old_one_expires() {
    let cluster = Cluster::start().await;
    let pki = cluster.path("pki");
    std::fs::create_dir(&pki).expect("pki dir");
    let valid_for = Duration::from_secs(8);
    let issued = SystemTime::now();
    let first = cluster.client_ca.client(&cluster.user(), valid_for);
    write_kubelet_pem(&pki, "kubelet-client-1.pem", &first);
    let current = pki.join("kubelet-client-current.pem");
    let mut agent = cluster.agent(json!({"client-certificate": current, "client-key": current}));
    cluster
        .watch_served_after(0, Duration::from_secs(30))
        .await
        .expect("the agent watches its pods with its first certificate");

    // The kubelet rotates well before expiry: a new file, the link swapped.
    let second = cluster
        .client_ca
        .client(&cluster.user(), Duration::from_secs(3600));
    write_kubelet_pem(&pki, "kubelet-client-2.pem", &second);
    sleep_until(past_expiry(valid_for, issued)).await;
    cluster
        .assert_served_again(
            &mut agent,
            RECOVERY,
            "no watch served after the first certificate expired",
        )
        .await;
    assert!(!unready_reasons(&agent).contains("api-credentials"));
    assert!(
        agent.log().contains("API credentials read again"),
        "{}",
        agent.log()
    );
}

#[tokio::test]
async fn a_token_file_rewritten_before_expiry_is_read_again() {
    let cluster = Cluster::start().await;
    let valid_for = Duration::from_secs(6);
    let expires = SystemTime::now() + valid_for;
    cluster
        .server
        .tokens()
        .add("token-1", &cluster.user(), Some(expires));
    let token_file = cluster.write("token", "token-1");
    let mut agent = cluster.agent(json!({"tokenFile": token_file}));
    cluster
        .watch_served_after(0, Duration::from_secs(30))
        .await
        .expect("the agent watches its pods with its first token");

    // As the kubelet re-projects a bound service-account token.
    cluster
        .server
        .tokens()
        .add("token-2", &cluster.user(), None);
    cluster.write("token", "token-2");
    sleep_until(expires + Duration::from_secs(1)).await;
    // kube-rs alone keeps a token file's content for a minute; the agent reads it again on
    // the first 401.
    cluster
        .assert_served_again(
            &mut agent,
            Duration::from_secs(20),
            "no watch served with the new token",
        )
        .await;
}

#[tokio::test]
async fn a_kubeconfig_rewritten_with_a_new_inline_token_is_read_again() {
    let cluster = Cluster::start().await;
    let expires = SystemTime::now() + Duration::from_secs(6);
    let tokens = cluster.server.tokens();
    tokens.add("inline-1", &cluster.user(), Some(expires));
    let mut agent = cluster.agent(json!({"token": "inline-1"}));
    cluster
        .watch_served_after(0, Duration::from_secs(30))
        .await
        .expect("the agent watches its pods with the first token");

    tokens.add("inline-2", &cluster.user(), None);
    let cluster_fields = json!({"certificate-authority": cluster.path("ca.crt")});
    let rewritten = cluster
        .server
        .kubeconfig_with(cluster_fields, json!({"token": "inline-2"}));
    cluster.write("kubeconfig", &rewritten);
    sleep_until(expires + Duration::from_secs(1)).await;
    cluster
        .assert_served_again(
            &mut agent,
            RECOVERY,
            "no watch served with the new kubeconfig",
        )
        .await;
}

#[tokio::test]
async fn an_exec_plugin_runs_again_when_its_token_is_refused() {
    let cluster = Cluster::start().await;
    let credential = |token: &str| {
        // No expirationTimestamp: kube-rs would keep this token for ever.
        json!({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
               "status": {"token": token}})
        .to_string()
    };
    let expires = SystemTime::now() + Duration::from_secs(6);
    cluster
        .server
        .tokens()
        .add("exec-1", &cluster.user(), Some(expires));
    let answer = cluster.write("exec-answer.json", &credential("exec-1"));
    let plugin = cluster.write(
        "plugin.sh",
        &format!("#!/bin/sh\nexec cat {}\n", answer.display()),
    );
    std::fs::set_permissions(&plugin, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let mut agent = cluster.agent(json!({"exec": {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": plugin,
        "interactiveMode": "Never",
    }}));
    cluster
        .watch_served_after(0, Duration::from_secs(30))
        .await
        .expect("the agent watches its pods with the plugin's first token");

    cluster.server.tokens().add("exec-2", &cluster.user(), None);
    cluster.write("exec-answer.json", &credential("exec-2"));
    sleep_until(expires + Duration::from_secs(1)).await;
    cluster
        .assert_served_again(
            &mut agent,
            Duration::from_secs(20),
            "no watch served with the plugin's new token",
        )
        .await;
}

#[tokio::test]
async fn a_replaced_ca_bundle_is_trusted_on_new_connections() {
    let cluster = Cluster::start().await;
    let certificate = cluster
        .client_ca
        .client(&cluster.user(), Duration::from_secs(3600));
    let cert = cluster.write("client.crt", &certificate.cert_pem);
    let key = cluster.write("client.key", &certificate.key_pem);
    let mut agent = cluster.agent(json!({"client-certificate": cert, "client-key": key}));
    cluster
        .watch_served_after(0, Duration::from_secs(30))
        .await
        .expect("the agent watches its pods");

    // The cluster's CA is rotated: the bundle on disk names only the new CA, and the API
    // server serves a certificate from it.
    let new_ca = TestCa::new("serving-2");
    cluster.write("ca.crt", &new_ca.pem());
    cluster
        .server
        .serving_tls()
        .expect("tls")
        .set_serving(&new_ca.serving(Duration::from_secs(3600)))
        .expect("serving certificate");
    cluster
        .assert_served_again(&mut agent, RECOVERY, "no watch served over the new CA")
        .await;
}

#[tokio::test]
async fn credentials_refused_after_reading_them_again_make_the_agent_unready_until_accepted() {
    let cluster = Cluster::start().await;
    cluster.server.tokens().add("token", &cluster.user(), None);
    let token_file = cluster.write("token", "token");
    let mut agent = cluster.agent(json!({"tokenFile": token_file}));
    cluster
        .watch_served_after(0, Duration::from_secs(30))
        .await
        .expect("the agent watches its pods");

    // Revoked, and nothing new on disk: definitely bad.
    cluster.server.tokens().revoke("token");
    let mark = cluster.last_seq();
    cluster.end_connections().await;
    let deadline = std::time::Instant::now() + RECOVERY;
    while !unready_reasons(&agent).contains("api-credentials") {
        assert!(
            std::time::Instant::now() < deadline,
            "/readyz never named the credentials: {}\n{}",
            unready_reasons(&agent),
            agent.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // It keeps retrying, with back-off: over 20 s, some refused requests, not a flood.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let refused = cluster.refusals_after(mark);
    assert!((2..=60).contains(&refused), "{refused} refused requests");
    assert_running(&mut agent);
    let said = agent
        .log()
        .lines()
        .filter(|l| l.contains("ERROR") && l.contains("refuses the agent's credentials"))
        .count();
    assert_eq!(said, 1, "{}", agent.log());

    // Accepted again (the token restored): ready as to the credentials, said once.
    cluster.server.tokens().add("token", &cluster.user(), None);
    let deadline = std::time::Instant::now() + RECOVERY;
    while unready_reasons(&agent).contains("api-credentials") {
        assert!(
            std::time::Instant::now() < deadline,
            "still unready: {}\n{}",
            unready_reasons(&agent),
            agent.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        agent
            .log()
            .contains("accepts the agent's credentials again")
    );
}
