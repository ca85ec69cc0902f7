//! Shared helpers for the integration tests: a server plus a kube-rs client for it.
#![allow(dead_code)]

use std::time::Duration;

use apiserver_double::{ApiServer, ServerConfig};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};

pub async fn server_with(config: ServerConfig) -> ApiServer {
    ApiServer::start(config).await.expect("server starts")
}

pub async fn server() -> ApiServer {
    server_with(ServerConfig::default()).await
}

/// A kube-rs client configured the way the agent would be: from a kubeconfig.
pub async fn client_for(server: &ApiServer, token: Option<&str>) -> kube::Client {
    let kc = Kubeconfig::from_yaml(&server.kubeconfig(token)).expect("kubeconfig parses");
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("config from kubeconfig");
    // Fail fast instead of hanging a test on a stalled request.
    cfg.read_timeout = Some(Duration::from_secs(20));
    kube::Client::try_from(cfg).expect("client builds")
}

pub async fn client(server: &ApiServer) -> kube::Client {
    client_for(server, None).await
}

/// A client without kube-rs's built-in retry of 429/503/504, to see those answers.
pub async fn client_no_retry(server: &ApiServer) -> kube::Client {
    let kc = Kubeconfig::from_yaml(&server.kubeconfig(None)).expect("kubeconfig parses");
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("config from kubeconfig");
    cfg.default_retry = false;
    kube::Client::try_from(cfg).expect("client builds")
}

pub fn pod(name: &str, node: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
        "spec": {
            "nodeName": node,
            "containers": [{
                "name": "app",
                "image": "busybox:1",
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                              "limits": {"cpu": "200m", "memory": "128Mi"}}
            }]
        }
    })
}

pub fn typed<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("typed object")
}

/// `kube::Error::Api` code, or panic.
pub fn api_code<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> (u16, String) {
    match r {
        Err(kube::Error::Api(s)) => (s.code, s.reason.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Poll until `f` holds or a few seconds pass.
pub async fn eventually(mut f: impl FnMut() -> bool) {
    for _ in 0..200 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("condition not reached in time");
}
