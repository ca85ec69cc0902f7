//! The CRI fault proxy: a CRI v1 server on a unix socket that forwards every RuntimeService and
//! ImageService call to the real runtime, and on request injects faults per method — an error
//! code (before or after the call reached the runtime), a hang, an empty or a malformed answer —
//! and counts calls per method and StopContainer calls per container (the instrument for
//! "never killed twice").
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use node_sandbox::criproxy::{CriProxy, Fault, FaultRule};
//! let dir = std::env::temp_dir();
//! let proxy = CriProxy::start(&dir, "unix:///run/inplaced-test/containerd.sock").await?;
//! // point the agent's --cri-endpoint at proxy.endpoint()
//! let rule = proxy.add(FaultRule::new("StopContainer", Fault::error(tonic::Code::Unavailable)).once());
//! // ... run the code under test ...
//! assert_eq!(proxy.fired(rule), 1);
//! assert!(proxy.stop_count("abc") <= 1);
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use futures::Stream;
use hyper_util::rt::TokioIo;
use inplaced::cri::proto::image_service_client::ImageServiceClient;
use inplaced::cri::proto::image_service_server::{ImageService, ImageServiceServer};
use inplaced::cri::proto::runtime_service_client::RuntimeServiceClient;
use inplaced::cri::proto::runtime_service_server::{RuntimeService, RuntimeServiceServer};
use inplaced::cri::proto::*;
use tokio::net::{UnixListener, UnixStream};
use tokio::task::JoinHandle;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::{Code, Request, Response, Status};

/// kubelet's CRI message limit, so big lists pass through.
const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// What a rule does to a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Answer with this gRPC code without forwarding: the runtime never sees the call.
    Error { code: Code, message: String },
    /// Forward (the runtime does it), then answer with this code: the caller cannot tell.
    ErrorAfter { code: Code, message: String },
    /// Wait this long, then forward (a slow or hung runtime; the caller's deadline may fire).
    Hang(Duration),
    /// Forward, then wait this long before answering (done, but the answer is late).
    HangAfter(Duration),
    /// Answer with the default (empty) message without forwarding, e.g. a ContainerStatus
    /// without status or an empty ListContainers.
    Empty,
    /// Forward, then answer with a damaged copy: missing metadata/status, garbage labels and
    /// annotations, an invalid state, a non-v1 API version (see [`Mangle`]).
    Malformed,
}

impl Fault {
    pub fn error(code: Code) -> Fault {
        Fault::Error {
            code,
            message: "injected by the CRI fault proxy".into(),
        }
    }

    pub fn error_after(code: Code) -> Fault {
        Fault::ErrorAfter {
            code,
            message: "injected by the CRI fault proxy after forwarding".into(),
        }
    }
}

/// A fault for calls of one method (the CRI method name, e.g. `StopContainer`), optionally only
/// for one container ID, applied always, a number of times, or after skipping some calls.
#[derive(Debug, Clone)]
pub struct FaultRule {
    pub method: String,
    pub fault: Fault,
    pub container_id: Option<String>,
    /// How many more times it applies (None: every time).
    pub remaining: Option<usize>,
    /// Matching calls let through before it starts applying.
    pub skip: usize,
}

impl FaultRule {
    pub fn new(method: &str, fault: Fault) -> FaultRule {
        FaultRule {
            method: method.to_owned(),
            fault,
            container_id: None,
            remaining: None,
            skip: 0,
        }
    }

    pub fn once(self) -> FaultRule {
        self.times(1)
    }

    pub fn times(mut self, n: usize) -> FaultRule {
        self.remaining = Some(n);
        self
    }

    pub fn skip(mut self, n: usize) -> FaultRule {
        self.skip = n;
        self
    }

    /// Only calls about this container (accepts `containerd://<id>` too).
    pub fn for_container(mut self, id: &str) -> FaultRule {
        self.container_id = Some(strip_scheme(id).to_owned());
        self
    }
}

fn strip_scheme(id: &str) -> &str {
    id.split_once("://").map_or(id, |(_, rest)| rest)
}

/// Handle of an added rule, for [`CriProxy::fired`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RuleId(u64);

#[derive(Default)]
struct Counters {
    calls: HashMap<String, usize>,
    stops: HashMap<String, usize>,
    stops_forwarded: HashMap<String, usize>,
    /// Container → how each of its StopContainer calls ended for the caller (true: answered OK).
    stop_outcomes: HashMap<String, Vec<bool>>,
    /// (method, container) → time the runtime took to answer the calls forwarded.
    upstream: HashMap<(String, String), Duration>,
    fired: HashMap<RuleId, usize>,
}

#[derive(Default)]
struct Rules {
    next: u64,
    list: Vec<(RuleId, FaultRule)>,
}

#[derive(Default)]
struct State {
    rules: Mutex<Rules>,
    counters: Mutex<Counters>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl State {
    /// Counts the call and picks the first rule that applies to it.
    fn begin(&self, method: &str, container_id: Option<&str>) -> Option<Fault> {
        {
            let mut c = lock(&self.counters);
            *c.calls.entry(method.to_owned()).or_default() += 1;
            if method == "StopContainer"
                && let Some(id) = container_id
            {
                *c.stops.entry(id.to_owned()).or_default() += 1;
                tracing::info!(container = %id, "CRI proxy: StopContainer received");
            }
        }
        let mut rules = lock(&self.rules);
        let mut picked = None;
        for (id, rule) in rules.list.iter_mut() {
            if rule.method != method {
                continue;
            }
            if let Some(want) = &rule.container_id
                && container_id != Some(want.as_str())
            {
                continue;
            }
            if rule.skip > 0 {
                rule.skip -= 1;
                continue;
            }
            if rule.remaining == Some(0) {
                continue;
            }
            if let Some(n) = rule.remaining.as_mut() {
                *n -= 1;
            }
            picked = Some((*id, rule.fault.clone()));
            break;
        }
        rules.list.retain(|(_, r)| r.remaining != Some(0));
        let (id, fault) = picked?;
        *lock(&self.counters).fired.entry(id).or_default() += 1;
        Some(fault)
    }

    fn forwarded(&self, method: &str, container_id: Option<&str>) {
        if method == "StopContainer"
            && let Some(id) = container_id
        {
            *lock(&self.counters)
                .stops_forwarded
                .entry(id.to_owned())
                .or_default() += 1;
        }
    }
}

/// A request's container, for per-container rules and the StopContainer counter.
pub trait TargetContainer {
    fn container_id(&self) -> Option<&str> {
        None
    }
}

macro_rules! with_container_id {
    ($($t:ty),* $(,)?) => {$(
        impl TargetContainer for $t {
            fn container_id(&self) -> Option<&str> { Some(&self.container_id) }
        }
    )*};
}
macro_rules! without_container_id {
    ($($t:ty),* $(,)?) => {$( impl TargetContainer for $t {} )*};
}
with_container_id!(
    StartContainerRequest,
    StopContainerRequest,
    RemoveContainerRequest,
    ContainerStatusRequest,
    UpdateContainerResourcesRequest,
    ReopenContainerLogRequest,
    ExecSyncRequest,
    ExecRequest,
    AttachRequest,
    ContainerStatsRequest,
    CheckpointContainerRequest,
);
without_container_id!(
    VersionRequest,
    RunPodSandboxRequest,
    StopPodSandboxRequest,
    RemovePodSandboxRequest,
    PodSandboxStatusRequest,
    ListPodSandboxRequest,
    CreateContainerRequest,
    ListContainersRequest,
    PortForwardRequest,
    ListContainerStatsRequest,
    PodSandboxStatsRequest,
    ListPodSandboxStatsRequest,
    UpdateRuntimeConfigRequest,
    StatusRequest,
    ListMetricDescriptorsRequest,
    ListPodSandboxMetricsRequest,
    RuntimeConfigRequest,
    GetEventsRequest,
    ListImagesRequest,
    ImageStatusRequest,
    PullImageRequest,
    RemoveImageRequest,
    ImageFsInfoRequest,
);

/// How [`Fault::Malformed`] damages an answer. Answers without a specific rule become empty.
pub trait Mangle: Default {
    fn mangle(self) -> Self {
        Self::default()
    }
}

fn garbage_labels() -> HashMap<String, String> {
    HashMap::from([
        ("io.kubernetes.pod.uid".to_owned(), String::new()),
        (
            "io.kubernetes.container.name".to_owned(),
            "\u{0}\u{fffd}".to_owned(),
        ),
        (
            "io.kubernetes.container.restartCount".to_owned(),
            "-1x".to_owned(),
        ),
        (
            "io.kubernetes.container.hash".to_owned(),
            "not-hex!".to_owned(),
        ),
        ("\u{fffd}garbage".to_owned(), "\u{1}".repeat(3)),
    ])
}

impl Mangle for ContainerStatusResponse {
    fn mangle(mut self) -> Self {
        if let Some(s) = self.status.as_mut() {
            s.metadata = None;
            s.state = 99;
            s.labels = garbage_labels();
            s.annotations = garbage_labels();
            s.image = None;
            s.created_at = -1;
        }
        self
    }
}

impl Mangle for ListContainersResponse {
    fn mangle(mut self) -> Self {
        for c in &mut self.containers {
            c.metadata = None;
            c.state = 99;
            c.labels = garbage_labels();
            c.annotations = garbage_labels();
            c.created_at = -1;
        }
        self
    }
}

impl Mangle for ListPodSandboxResponse {
    fn mangle(mut self) -> Self {
        for s in &mut self.items {
            s.metadata = None;
            s.state = 99;
            s.labels = garbage_labels();
        }
        self
    }
}

impl Mangle for PodSandboxStatusResponse {
    fn mangle(mut self) -> Self {
        if let Some(s) = self.status.as_mut() {
            s.metadata = None;
            s.labels = garbage_labels();
        }
        self
    }
}

impl Mangle for VersionResponse {
    fn mangle(mut self) -> Self {
        self.runtime_api_version = "v1alpha2".into();
        self.runtime_name = String::new();
        self
    }
}

impl Mangle for ExecSyncResponse {
    fn mangle(mut self) -> Self {
        self.exit_code = -1;
        self.stdout = vec![0xff, 0xfe, 0x00];
        self
    }
}

macro_rules! empty_mangle {
    ($($t:ty),* $(,)?) => {$( impl Mangle for $t {} )*};
}
empty_mangle!(
    RunPodSandboxResponse,
    StopPodSandboxResponse,
    RemovePodSandboxResponse,
    CreateContainerResponse,
    StartContainerResponse,
    StopContainerResponse,
    RemoveContainerResponse,
    UpdateContainerResourcesResponse,
    ReopenContainerLogResponse,
    ExecResponse,
    AttachResponse,
    PortForwardResponse,
    ContainerStatsResponse,
    ListContainerStatsResponse,
    PodSandboxStatsResponse,
    ListPodSandboxStatsResponse,
    UpdateRuntimeConfigResponse,
    StatusResponse,
    CheckpointContainerResponse,
    ListMetricDescriptorsResponse,
    ListPodSandboxMetricsResponse,
    RuntimeConfigResponse,
    ListImagesResponse,
    ImageStatusResponse,
    PullImageResponse,
    RemoveImageResponse,
    ImageFsInfoResponse,
);

/// An upstream failure as a gRPC proxy reports it: not reaching the runtime (a transport error
/// of the proxy's own client) is UNAVAILABLE, as envoy and other gRPC proxies answer; the
/// runtime's own answers pass through unchanged.
fn relay(status: Status) -> Status {
    if std::error::Error::source(&status).is_some() {
        Status::unavailable(format!("upstream runtime: {}", status.message()))
    } else {
        status
    }
}

/// Applies the rule for one unary call around `forward`.
async fn intercept<Req, Resp, F, Fut>(
    state: &State,
    method: &'static str,
    request: Request<Req>,
    forward: F,
) -> Result<Response<Resp>, Status>
where
    Req: TargetContainer,
    Resp: Mangle,
    F: FnOnce(Req) -> Fut,
    Fut: std::future::Future<Output = Result<Response<Resp>, Status>>,
{
    let req = request.into_inner();
    let cid = req.container_id().map(str::to_owned);
    let answer = answer_call(state, method, cid.as_deref(), req, forward).await;
    if method == "StopContainer"
        && let Some(id) = &cid
    {
        lock(&state.counters)
            .stop_outcomes
            .entry(id.clone())
            .or_default()
            .push(answer.is_ok());
    }
    answer
}

/// The call's answer: the rule's fault, or the runtime's answer (mangled as the rule says).
async fn answer_call<Req, Resp, F, Fut>(
    state: &State,
    method: &'static str,
    cid: Option<&str>,
    req: Req,
    forward: F,
) -> Result<Response<Resp>, Status>
where
    Resp: Mangle,
    F: FnOnce(Req) -> Fut,
    Fut: std::future::Future<Output = Result<Response<Resp>, Status>>,
{
    let fault = state.begin(method, cid);
    match &fault {
        Some(Fault::Error { code, message }) => return Err(Status::new(*code, message.clone())),
        Some(Fault::Empty) => return Ok(Response::new(Resp::default())),
        Some(Fault::Hang(d)) => tokio::time::sleep(*d).await,
        _ => {}
    }
    state.forwarded(method, cid);
    let asked = std::time::Instant::now();
    let answer = forward(req).await;
    if let Some(id) = cid {
        *lock(&state.counters)
            .upstream
            .entry((method.to_owned(), id.to_owned()))
            .or_default() += asked.elapsed();
    }
    let answer = answer.map_err(relay)?.into_inner();
    match fault {
        Some(Fault::ErrorAfter { code, message }) => Err(Status::new(code, message)),
        Some(Fault::HangAfter(d)) => {
            tokio::time::sleep(d).await;
            Ok(Response::new(answer))
        }
        Some(Fault::Malformed) => Ok(Response::new(answer.mangle())),
        _ => Ok(Response::new(answer)),
    }
}

#[derive(Clone)]
struct RuntimeProxy {
    state: Arc<State>,
    upstream: RuntimeServiceClient<Channel>,
}

#[derive(Clone)]
struct ImageProxy {
    state: Arc<State>,
    upstream: ImageServiceClient<Channel>,
}

macro_rules! unary_forwarders {
    ($svc:ident, $trait:ident, [$($method:ident, $name:literal, $req:ty, $resp:ty;)*], { $($extra:tt)* }) => {
        #[tonic::async_trait]
        impl $trait for $svc {
            $(
                async fn $method(&self, request: Request<$req>) -> Result<Response<$resp>, Status> {
                    let mut upstream = self.upstream.clone();
                    intercept(&self.state, $name, request, |r| async move {
                        upstream.$method(r).await
                    })
                    .await
                }
            )*
            $($extra)*
        }
    };
}

type EventStream = Pin<Box<dyn Stream<Item = Result<ContainerEventResponse, Status>> + Send>>;

unary_forwarders!(RuntimeProxy, RuntimeService, [
    version, "Version", VersionRequest, VersionResponse;
    run_pod_sandbox, "RunPodSandbox", RunPodSandboxRequest, RunPodSandboxResponse;
    stop_pod_sandbox, "StopPodSandbox", StopPodSandboxRequest, StopPodSandboxResponse;
    remove_pod_sandbox, "RemovePodSandbox", RemovePodSandboxRequest, RemovePodSandboxResponse;
    pod_sandbox_status, "PodSandboxStatus", PodSandboxStatusRequest, PodSandboxStatusResponse;
    list_pod_sandbox, "ListPodSandbox", ListPodSandboxRequest, ListPodSandboxResponse;
    create_container, "CreateContainer", CreateContainerRequest, CreateContainerResponse;
    start_container, "StartContainer", StartContainerRequest, StartContainerResponse;
    stop_container, "StopContainer", StopContainerRequest, StopContainerResponse;
    remove_container, "RemoveContainer", RemoveContainerRequest, RemoveContainerResponse;
    list_containers, "ListContainers", ListContainersRequest, ListContainersResponse;
    container_status, "ContainerStatus", ContainerStatusRequest, ContainerStatusResponse;
    update_container_resources, "UpdateContainerResources", UpdateContainerResourcesRequest, UpdateContainerResourcesResponse;
    reopen_container_log, "ReopenContainerLog", ReopenContainerLogRequest, ReopenContainerLogResponse;
    exec_sync, "ExecSync", ExecSyncRequest, ExecSyncResponse;
    exec, "Exec", ExecRequest, ExecResponse;
    attach, "Attach", AttachRequest, AttachResponse;
    port_forward, "PortForward", PortForwardRequest, PortForwardResponse;
    container_stats, "ContainerStats", ContainerStatsRequest, ContainerStatsResponse;
    list_container_stats, "ListContainerStats", ListContainerStatsRequest, ListContainerStatsResponse;
    pod_sandbox_stats, "PodSandboxStats", PodSandboxStatsRequest, PodSandboxStatsResponse;
    list_pod_sandbox_stats, "ListPodSandboxStats", ListPodSandboxStatsRequest, ListPodSandboxStatsResponse;
    update_runtime_config, "UpdateRuntimeConfig", UpdateRuntimeConfigRequest, UpdateRuntimeConfigResponse;
    status, "Status", StatusRequest, StatusResponse;
    checkpoint_container, "CheckpointContainer", CheckpointContainerRequest, CheckpointContainerResponse;
    list_metric_descriptors, "ListMetricDescriptors", ListMetricDescriptorsRequest, ListMetricDescriptorsResponse;
    list_pod_sandbox_metrics, "ListPodSandboxMetrics", ListPodSandboxMetricsRequest, ListPodSandboxMetricsResponse;
    runtime_config, "RuntimeConfig", RuntimeConfigRequest, RuntimeConfigResponse;
], {
    type GetContainerEventsStream = EventStream;

    /// Streams pass through; only Error/Empty faults apply (an empty stream for Empty).
    async fn get_container_events(
        &self,
        request: Request<GetEventsRequest>,
    ) -> Result<Response<EventStream>, Status> {
        match self.state.begin("GetContainerEvents", None) {
            Some(Fault::Error { code, message } | Fault::ErrorAfter { code, message }) => {
                return Err(Status::new(code, message));
            }
            Some(Fault::Empty) => {
                return Ok(Response::new(Box::pin(futures::stream::empty())));
            }
            Some(Fault::Hang(d) | Fault::HangAfter(d)) => tokio::time::sleep(d).await,
            Some(Fault::Malformed) | None => {}
        }
        let stream = self
            .upstream
            .clone()
            .get_container_events(request.into_inner())
            .await?
            .into_inner();
        Ok(Response::new(Box::pin(stream)))
    }
});

unary_forwarders!(ImageProxy, ImageService, [
    list_images, "ListImages", ListImagesRequest, ListImagesResponse;
    image_status, "ImageStatus", ImageStatusRequest, ImageStatusResponse;
    pull_image, "PullImage", PullImageRequest, PullImageResponse;
    remove_image, "RemoveImage", RemoveImageRequest, RemoveImageResponse;
    image_fs_info, "ImageFsInfo", ImageFsInfoRequest, ImageFsInfoResponse;
], {});

/// A running proxy. Dropping it stops serving and removes the socket.
pub struct CriProxy {
    socket: PathBuf,
    state: Arc<State>,
    task: JoinHandle<()>,
}

impl CriProxy {
    /// Serves on `<dir>/cri-proxy.sock`, forwarding to `upstream` (`unix:///path` or a path).
    pub async fn start(dir: &Path, upstream: &str) -> anyhow::Result<CriProxy> {
        Self::start_at(&dir.join("cri-proxy.sock"), upstream).await
    }

    /// Serves on exactly this socket path.
    pub async fn start_at(socket: &Path, upstream: &str) -> anyhow::Result<CriProxy> {
        let upstream_path = PathBuf::from(upstream.strip_prefix("unix://").unwrap_or(upstream));
        // The URI is required by tonic but unused: every connection goes to the unix socket.
        let channel = Endpoint::from_static("http://cri-upstream.local")
            .connect_timeout(Duration::from_secs(2))
            .connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
                let path = upstream_path.clone();
                async move { UnixStream::connect(path).await.map(TokioIo::new) }
            }));
        let state = Arc::new(State::default());
        let runtime = RuntimeProxy {
            state: state.clone(),
            upstream: RuntimeServiceClient::new(channel.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
        };
        let images = ImageProxy {
            state: state.clone(),
            upstream: ImageServiceClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
        };
        if let Some(parent) = socket.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        let _ = std::fs::remove_file(socket);
        let listener =
            UnixListener::bind(socket).with_context(|| format!("binding {}", socket.display()))?;
        let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
        let server = tonic::transport::Server::builder()
            .add_service(
                RuntimeServiceServer::new(runtime)
                    .max_decoding_message_size(MAX_MESSAGE_BYTES)
                    .max_encoding_message_size(MAX_MESSAGE_BYTES),
            )
            .add_service(
                ImageServiceServer::new(images)
                    .max_decoding_message_size(MAX_MESSAGE_BYTES)
                    .max_encoding_message_size(MAX_MESSAGE_BYTES),
            );
        let task = tokio::spawn(async move {
            if let Err(e) = server.serve_with_incoming(incoming).await {
                tracing::warn!(error = %e, "CRI proxy stopped");
            }
        });
        Ok(CriProxy {
            socket: socket.to_owned(),
            state,
            task,
        })
    }

    /// `unix:///.../cri-proxy.sock`: what the agent's `--cri-endpoint` gets.
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    pub fn add(&self, rule: FaultRule) -> RuleId {
        let mut rules = lock(&self.state.rules);
        rules.next += 1;
        let id = RuleId(rules.next);
        rules.list.push((id, rule));
        id
    }

    /// Removes every rule (counters are kept).
    pub fn clear(&self) {
        lock(&self.state.rules).list.clear();
    }

    pub fn remove(&self, id: RuleId) {
        lock(&self.state.rules).list.retain(|(i, _)| *i != id);
    }

    /// How many calls this rule has answered.
    pub fn fired(&self, id: RuleId) -> usize {
        lock(&self.state.counters)
            .fired
            .get(&id)
            .copied()
            .unwrap_or(0)
    }

    /// StopContainer calls received for this container (`containerd://` prefix accepted),
    /// faulted ones included.
    pub fn stop_count(&self, container_id: &str) -> usize {
        lock(&self.state.counters)
            .stops
            .get(strip_scheme(container_id))
            .copied()
            .unwrap_or(0)
    }

    /// StopContainer calls that reached the runtime for this container.
    pub fn stops_forwarded(&self, container_id: &str) -> usize {
        lock(&self.state.counters)
            .stops_forwarded
            .get(strip_scheme(container_id))
            .copied()
            .unwrap_or(0)
    }

    /// How each StopContainer call for this container ended for the agent, in order (true:
    /// answered OK). A call that failed (the runtime went away under it) may be followed by
    /// another; one answered OK never should be.
    pub fn stop_outcomes(&self, container_id: &str) -> Vec<bool> {
        lock(&self.state.counters)
            .stop_outcomes
            .get(strip_scheme(container_id))
            .cloned()
            .unwrap_or_default()
    }

    /// How long the runtime took, in all, to answer the forwarded `method` calls naming this
    /// container: the runtime's share of a reaction measured through the proxy.
    pub fn upstream_time(&self, method: &str, container_id: &str) -> Duration {
        lock(&self.state.counters)
            .upstream
            .get(&(method.to_owned(), strip_scheme(container_id).to_owned()))
            .copied()
            .unwrap_or_default()
    }

    pub fn stop_counts(&self) -> HashMap<String, usize> {
        lock(&self.state.counters).stops.clone()
    }

    /// Calls received for a method (e.g. `ListContainers`).
    pub fn calls(&self, method: &str) -> usize {
        lock(&self.state.counters)
            .calls
            .get(method)
            .copied()
            .unwrap_or(0)
    }

    pub fn call_counts(&self) -> HashMap<String, usize> {
        lock(&self.state.counters).calls.clone()
    }

    pub fn reset_counters(&self) {
        *lock(&self.state.counters) = Counters::default();
    }

    pub fn shutdown(self) {
        drop(self)
    }
}

impl Drop for CriProxy {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.socket);
    }
}
