//! What a kill runs before the stop: the container's preStop hook as kruise's
//! ContainerRecreateRequest and the pod spec describe it (the same JSON shape), and the grace
//! rules around it.

use serde::{Deserialize, Serialize};

/// The grace period when neither the request nor the pod says (kruise-daemon's default, and
/// the kubelet's `terminationGracePeriodSeconds` default).
pub const DEFAULT_TERMINATION_GRACE_SECONDS: i64 = 30;
/// StopContainer always gets at least this long after the preStop hook.
pub const MIN_STOP_GRACE_SECONDS: i64 = 2;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerPort {
    #[serde(default)]
    pub name: Option<String>,
    pub container_port: i32,
}

/// A lifecycle handler: kruise's webhook copies the pod's preStop here.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreStop {
    #[serde(default)]
    pub exec: Option<ExecAction>,
    #[serde(default)]
    pub http_get: Option<HttpGetAction>,
    #[serde(default)]
    pub tcp_socket: Option<TcpSocketAction>,
    #[serde(default)]
    pub sleep: Option<SleepAction>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ExecAction {
    #[serde(default)]
    pub command: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpGetAction {
    #[serde(default)]
    pub path: Option<String>,
    pub port: IntOrString,
    #[serde(default)]
    pub host: Option<String>,
    #[serde(default)]
    pub scheme: Option<String>,
    #[serde(default)]
    pub http_headers: Vec<HttpHeader>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HttpHeader {
    pub name: String,
    pub value: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TcpSocketAction {
    pub port: IntOrString,
    #[serde(default)]
    pub host: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SleepAction {
    pub seconds: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum IntOrString {
    Int(i32),
    String(String),
}

impl Default for IntOrString {
    fn default() -> Self {
        IntOrString::Int(0)
    }
}
