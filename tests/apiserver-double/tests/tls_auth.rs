//! HTTPS and authentication as kube-apiserver does them, seen from kube-rs: client
//! certificates checked per request (an expired one is 401), tokens that expire, and a
//! serving certificate and client CA replaced while the server runs.

mod common;

use std::time::{Duration, SystemTime};

use apiserver_double::{ApiServer, Credential, ServerConfig, TestCa, TlsSetup};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};

struct Pki {
    server_ca: TestCa,
    client_ca: TestCa,
    dir: tempfile::TempDir,
}

impl Pki {
    fn new() -> Pki {
        Pki {
            server_ca: TestCa::new("serving"),
            client_ca: TestCa::new("clients"),
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    async fn server(&self) -> ApiServer {
        let server = common::server_with(ServerConfig {
            tls: Some(TlsSetup {
                serving: self.server_ca.serving(Duration::from_secs(3600)),
                client_ca_pem: Some(self.client_ca.pem()),
            }),
            ..Default::default()
        })
        .await;
        server
            .store()
            .create("nodes", json!({"metadata": {"name": "n1"}}))
            .expect("node");
        server
    }

    fn write(&self, name: &str, text: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).expect("write");
        path.display().to_string()
    }

    /// The cluster part of a kubeconfig trusting `ca_pem`.
    fn cluster(&self, ca_pem: &str) -> Value {
        json!({"certificate-authority": self.write("ca.crt", ca_pem)})
    }

    fn certificate_user(&self, credential: &Credential) -> Value {
        json!({
            "client-certificate": self.write("client.crt", &credential.cert_pem),
            "client-key": self.write("client.key", &credential.key_pem),
        })
    }
}

async fn client(server: &ApiServer, cluster: Value, user: Value) -> kube::Client {
    let kubeconfig = Kubeconfig::from_yaml(&server.kubeconfig_with(cluster, user)).expect("yaml");
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .expect("config");
    config.read_timeout = Some(Duration::from_secs(20));
    kube::Client::try_from(config).expect("client")
}

/// The answer's status code, 200 for success; a connection that failed is `None`.
async fn code_of_get(client: kube::Client) -> Option<u16> {
    match Api::<Node>::all(client).get("n1").await {
        Ok(_) => Some(200),
        Err(kube::Error::Api(status)) => Some(status.code),
        Err(_) => None,
    }
}

fn last_user(server: &ApiServer) -> String {
    server
        .audit()
        .entries()
        .last()
        .map(|e| e.request.user.clone())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_client_certificate_names_the_user_until_it_expires() {
    let pki = Pki::new();
    let server = pki.server().await;
    assert!(server.url().starts_with("https://"));
    let short = pki
        .client_ca
        .client("system:node:n1", Duration::from_secs(2));
    let client = client(
        &server,
        pki.cluster(&pki.server_ca.pem()),
        pki.certificate_user(&short),
    )
    .await;
    assert_eq!(code_of_get(client.clone()).await, Some(200));
    assert_eq!(last_user(&server), "system:node:n1");
    // Certificate times have whole seconds, and a certificate is valid through its last one.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    // kube-apiserver checks the certificate per request: the same client, even on a
    // connection opened before, is now refused with 401.
    assert_eq!(code_of_get(client).await, Some(401));
}

#[tokio::test]
async fn a_certificate_from_another_ca_is_refused_and_a_token_still_counts() {
    let pki = Pki::new();
    let server = pki.server().await;
    let stranger = TestCa::new("stranger").client("system:node:n1", Duration::from_secs(60));
    let cluster = pki.cluster(&pki.server_ca.pem());
    let refused = client(&server, cluster.clone(), pki.certificate_user(&stranger)).await;
    assert_eq!(code_of_get(refused).await, Some(401));

    server.tokens().add("t", "token-user", None);
    let mut user = pki.certificate_user(&stranger);
    user["token"] = json!("t");
    assert_eq!(
        code_of_get(client(&server, cluster.clone(), user).await).await,
        Some(200)
    );
    assert_eq!(last_user(&server), "token-user");
    let anonymous = client(&server, cluster, json!({})).await;
    assert_eq!(code_of_get(anonymous).await, Some(200));
    assert_eq!(last_user(&server), "system:anonymous");
}

#[tokio::test]
async fn a_token_is_refused_once_it_expires_or_is_revoked() {
    let pki = Pki::new();
    let server = pki.server().await;
    let expires = SystemTime::now() + Duration::from_secs(2);
    server.tokens().add("short", "alice", Some(expires));
    server.tokens().add("long", "bob", None);
    let cluster = pki.cluster(&pki.server_ca.pem());
    let short = client(&server, cluster.clone(), json!({"token": "short"})).await;
    let long = client(&server, cluster, json!({"token": "long"})).await;
    assert_eq!(code_of_get(short.clone()).await, Some(200));
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(code_of_get(short).await, Some(401));
    assert_eq!(code_of_get(long.clone()).await, Some(200));
    server.tokens().revoke("long");
    assert_eq!(code_of_get(long).await, Some(401));
}

#[tokio::test]
async fn a_replaced_serving_certificate_needs_the_new_ca_and_a_replaced_client_ca_the_new_certificates()
 {
    let pki = Pki::new();
    let server = pki.server().await;
    let old_trust = pki.cluster(&pki.server_ca.pem());
    assert_eq!(
        code_of_get(client(&server, old_trust.clone(), json!({})).await).await,
        Some(200)
    );

    let new_server_ca = TestCa::new("serving-2");
    server
        .serving_tls()
        .expect("tls")
        .set_serving(&new_server_ca.serving(Duration::from_secs(3600)))
        .expect("serving certificate");
    // A client that trusts only the old CA cannot connect any more (TLS fails, no answer).
    assert_eq!(
        code_of_get(client(&server, old_trust, json!({})).await).await,
        None
    );
    let new_trust = pki.cluster(&new_server_ca.pem());
    let issued = pki
        .client_ca
        .client("system:node:n1", Duration::from_secs(60));
    assert_eq!(
        code_of_get(client(&server, new_trust.clone(), pki.certificate_user(&issued)).await).await,
        Some(200)
    );

    let new_client_ca = TestCa::new("clients-2");
    server
        .client_ca()
        .expect("tls")
        .set(&new_client_ca.pem())
        .expect("client CA");
    let old_issue = client(&server, new_trust.clone(), pki.certificate_user(&issued)).await;
    assert_eq!(code_of_get(old_issue).await, Some(401));
    let reissued = new_client_ca.client("system:node:n1", Duration::from_secs(60));
    let new_issue = client(&server, new_trust, pki.certificate_user(&reissued)).await;
    assert_eq!(code_of_get(new_issue).await, Some(200));
    assert_eq!(last_user(&server), "system:node:n1");
}

#[tokio::test]
async fn a_client_certificates_organization_is_the_users_group() {
    let pki = Pki::new();
    let server = pki.server().await;
    let kubelet =
        pki.client_ca
            .client_in_group("system:node:n1", "system:nodes", Duration::from_secs(60));
    let cluster = pki.cluster(&pki.server_ca.pem());
    let client = client(&server, cluster.clone(), pki.certificate_user(&kubelet)).await;
    assert_eq!(code_of_get(client).await, Some(200));
    let last = server.audit().entries().pop().expect("audited");
    assert_eq!(
        (last.request.user.as_str(), last.request.groups.clone()),
        (
            "system:node:n1",
            vec!["system:nodes".to_owned(), "system:authenticated".to_owned()]
        )
    );
    let anonymous = client_anonymous(&server, cluster).await;
    assert_eq!(code_of_get(anonymous).await, Some(200));
    let last = server.audit().entries().pop().expect("audited");
    assert_eq!(
        last.request.groups,
        vec!["system:unauthenticated".to_owned()]
    );
}

async fn client_anonymous(server: &ApiServer, cluster: Value) -> kube::Client {
    client(server, cluster, json!({})).await
}
