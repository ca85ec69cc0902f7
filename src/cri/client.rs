//! The CRI client: one lazily (re)connecting channel, typed calls with timeouts, retries for
//! idempotent calls only.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable};
use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

use super::brief::{ContainerBrief, ListContainersBrief, ListPodSandboxBrief, PodSandboxBrief};
#[cfg(feature = "test-support")]
use super::proto::image_service_client::ImageServiceClient;
use super::proto::runtime_service_client::RuntimeServiceClient;
use super::proto::*;
use super::{CallObserver, CriEndpoint, CriError};

/// kubelet's own CRI message size limit; large ListContainers answers on busy nodes need it.
const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// Connection and call settings.
#[derive(Clone, Debug)]
pub struct CriConfig {
    pub endpoint: CriEndpoint,
    /// Deadline of one call (StopContainer and ExecSync add their own timeout on top).
    pub call_timeout: Duration,
    pub connect_timeout: Duration,
    /// Attempts for an idempotent call that fails transiently (1 = no retry).
    pub max_attempts: usize,
    pub retry_min_delay: Duration,
    pub retry_max_delay: Duration,
}

impl CriConfig {
    pub fn new(endpoint: CriEndpoint) -> Self {
        Self {
            endpoint,
            call_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(2),
            max_attempts: 4,
            retry_min_delay: Duration::from_millis(100),
            retry_max_delay: Duration::from_secs(2),
        }
    }
}

/// What the runtime says about itself in `Version`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct RuntimeInfo {
    /// e.g. `containerd`; also the scheme of container IDs in pod status (`containerd://<id>`).
    pub runtime_name: String,
    pub runtime_version: String,
    pub runtime_api_version: String,
}

/// Whether a call may be sent again after a transient failure without changing its effect.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Idempotent {
    Yes,
    No,
}

/// The pod a container must belong to, as kubelet labels its containers.
#[derive(Clone, Copy, Debug)]
pub struct PodLabels<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    /// The runtime UID (a static pod's own, not its mirror's).
    pub uid: &'a str,
}

/// A CRI v1 client. Cheap to clone; clones share the connection.
#[derive(Clone)]
pub struct CriClient {
    config: CriConfig,
    runtime: RuntimeServiceClient<Channel>,
    /// For calls decoded through a brief view instead of the generated stubs.
    channel: Channel,
    observer: Option<Arc<dyn CallObserver>>,
}

impl CriClient {
    /// Builds the client without connecting: the channel connects on first use and reconnects
    /// after the runtime restarts, so a runtime that is down at start is not an error here.
    pub fn new(config: CriConfig) -> Self {
        let socket = config.endpoint.path().to_owned();
        // The URI is required by tonic but unused: every connection goes to the unix socket.
        let channel = Endpoint::from_static("http://cri.local")
            .connect_timeout(config.connect_timeout)
            .connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
                let socket = socket.clone();
                async move { UnixStream::connect(socket).await.map(TokioIo::new) }
            }));
        let runtime = RuntimeServiceClient::new(channel.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        Self {
            config,
            runtime,
            channel,
            observer: None,
        }
    }

    /// Reports every call attempt's method, code and latency to `observer`.
    pub fn with_observer(mut self, observer: Arc<dyn CallObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    pub fn endpoint(&self) -> &CriEndpoint {
        &self.config.endpoint
    }

    /// `Version`, checked: a runtime that does not serve `runtime.v1` (only v1alpha2, or not CRI
    /// at all) gets [`CriError::NotCriV1`], distinct from a runtime that is merely down.
    pub async fn version(&self) -> Result<RuntimeInfo, CriError> {
        let request = VersionRequest {
            version: "v1".into(),
        };
        let result = self
            .runtime_call(
                "Version",
                Idempotent::Yes,
                self.config.call_timeout,
                |mut c| {
                    let request = request.clone();
                    async move { c.version(request).await }
                },
            )
            .await;
        let endpoint = self.config.endpoint.to_string();
        match result {
            Ok(v)
                if v.runtime_api_version.starts_with("v1")
                    && !v.runtime_api_version.contains("alpha") =>
            {
                Ok(RuntimeInfo {
                    runtime_name: v.runtime_name,
                    runtime_version: v.runtime_version,
                    runtime_api_version: v.runtime_api_version,
                })
            }
            Ok(v) => Err(CriError::NotCriV1 {
                endpoint,
                detail: format!("it reports API version {:?}", v.runtime_api_version),
            }),
            // Something listens but the gRPC call failed: tell a server that is not HTTP/2 at
            // all from a gRPC server without runtime.v1 and from a runtime that is restarting.
            Err(err @ (CriError::Call { .. } | CriError::Unavailable { .. })) => {
                let probe =
                    not_http2(self.config.endpoint.path(), self.config.connect_timeout).await;
                match (probe, err) {
                    (Some(answer), _) => Err(CriError::NotCriV1 {
                        endpoint,
                        detail: format!(
                            "the socket does not speak gRPC/HTTP2; it answered {answer:?}"
                        ),
                    }),
                    // No such service: a gRPC server, but not a CRI v1 runtime (Docker's
                    // containerd with its CRI plugin off). Other answers (`Unknown: server is
                    // not initialized yet` while a runtime starts) are the runtime's, to retry.
                    (
                        None,
                        CriError::Call {
                            code: tonic::Code::Unimplemented,
                            message,
                            ..
                        },
                    ) => Err(CriError::NotCriV1 {
                        endpoint,
                        detail: format!(
                            "runtime.v1.RuntimeService/Version answered Unimplemented: {message}"
                        ),
                    }),
                    (None, other) => Err(other),
                }
            }
            Err(other) => Err(other),
        }
    }

    pub async fn status(&self, verbose: bool) -> Result<StatusResponse, CriError> {
        let request = StatusRequest { verbose };
        self.runtime_call(
            "Status",
            Idempotent::Yes,
            self.config.call_timeout,
            |mut c| async move { c.status(request).await },
        )
        .await
    }

    pub async fn list_pod_sandboxes(
        &self,
        filter: Option<PodSandboxFilter>,
    ) -> Result<Vec<PodSandbox>, CriError> {
        let request = ListPodSandboxRequest { filter };
        let response = self
            .runtime_call(
                "ListPodSandbox",
                Idempotent::Yes,
                self.config.call_timeout,
                |mut c| {
                    let request = request.clone();
                    async move { c.list_pod_sandbox(request).await }
                },
            )
            .await?;
        Ok(response.items)
    }

    pub async fn list_containers(
        &self,
        filter: Option<ContainerFilter>,
    ) -> Result<Vec<Container>, CriError> {
        let request = ListContainersRequest { filter };
        let response = self
            .runtime_call(
                "ListContainers",
                Idempotent::Yes,
                self.config.call_timeout,
                |mut c| {
                    let request = request.clone();
                    async move { c.list_containers(request).await }
                },
            )
            .await?;
        Ok(response.containers)
    }

    /// `ListContainers` read through a brief view: every container's ID and state, nothing
    /// else decoded (no label or annotation map is built).
    pub(crate) async fn list_container_states(&self) -> Result<Vec<ContainerBrief>, CriError> {
        let response: ListContainersBrief = self
            .brief_call(
                "ListContainers",
                "/runtime.v1.RuntimeService/ListContainers",
                ListContainersRequest::default(),
            )
            .await?;
        Ok(response.containers)
    }

    /// `ListPodSandbox` read through a brief view: every sandbox's ID and state.
    pub(crate) async fn list_pod_sandbox_states(&self) -> Result<Vec<PodSandboxBrief>, CriError> {
        let response: ListPodSandboxBrief = self
            .brief_call(
                "ListPodSandbox",
                "/runtime.v1.RuntimeService/ListPodSandbox",
                ListPodSandboxRequest::default(),
            )
            .await?;
        Ok(response.items)
    }

    /// `ContainerStatus`; `verbose` adds the runtime's info map (containerd: the OCI spec, pid).
    pub async fn container_status(
        &self,
        container_id: &str,
        verbose: bool,
    ) -> Result<ContainerStatusResponse, CriError> {
        let request = ContainerStatusRequest {
            container_id: container_id.into(),
            verbose,
        };
        self.runtime_call(
            "ContainerStatus",
            Idempotent::Yes,
            self.config.call_timeout,
            |mut c| {
                let request = request.clone();
                async move { c.container_status(request).await }
            },
        )
        .await
    }

    /// Whether the container `id` runs now as `container` of `pod` (its namespace, name and
    /// runtime UID, as kubelet labels them). Asked of the runtime: callers check their target
    /// with it right before a kill, so a stale view never directs one (a replaced container has
    /// exited first: kubelet starts a container's successor only after it ended).
    /// `ContainerStatus` looks up one container; a filtered `ListContainers` would make the
    /// runtime build every container's answer first, slow on a busy node right when a kill
    /// should be quick.
    pub(crate) async fn still_running(
        &self,
        id: &str,
        pod: PodLabels<'_>,
        container: &str,
    ) -> Result<bool, CriError> {
        let status = match self.container_status(id, false).await {
            Ok(response) => response.status,
            Err(err) if err.is_not_found() => return Ok(false),
            Err(err) => return Err(err),
        };
        Ok(status.is_some_and(|s| {
            let label = |key: &str| s.labels.get(key).map(String::as_str);
            s.state == ContainerState::ContainerRunning as i32
                && label(super::labels::POD_UID) == Some(pod.uid)
                && label(super::labels::POD_NAMESPACE) == Some(pod.namespace)
                && label(super::labels::POD_NAME) == Some(pod.name)
                && s.labels
                    .get(super::labels::CONTAINER_NAME)
                    .map(String::as_str)
                    == Some(container)
        }))
    }

    /// Runs a command in a container and waits up to `timeout` for it. Never retried: the command
    /// may have side effects (a preStop hook).
    pub async fn exec_sync(
        &self,
        container_id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> Result<ExecSyncResponse, CriError> {
        let request = ExecSyncRequest {
            container_id: container_id.into(),
            cmd,
            timeout: timeout.as_secs().try_into().unwrap_or(i64::MAX),
        };
        let deadline = timeout + self.config.call_timeout;
        self.runtime_call("ExecSync", Idempotent::No, deadline, |mut c| {
            let request = request.clone();
            async move { c.exec_sync(request).await }
        })
        .await
    }

    /// Stops a container, giving it `grace` after SIGTERM before SIGKILL. Never retried here:
    /// callers count kills, and decide themselves whether a failed stop is tried again.
    pub async fn stop_container(
        &self,
        container_id: &str,
        grace: Duration,
    ) -> Result<(), CriError> {
        let request = StopContainerRequest {
            container_id: container_id.into(),
            timeout: grace.as_secs().try_into().unwrap_or(i64::MAX),
        };
        let deadline = grace + self.config.call_timeout;
        self.runtime_call("StopContainer", Idempotent::No, deadline, |mut c| {
            let request = request.clone();
            async move { c.stop_container(request).await }
        })
        .await
        .map(drop)
    }

    /// Applies resources to a running container; setting the same values twice is harmless.
    pub async fn update_container_resources(
        &self,
        container_id: &str,
        linux: LinuxContainerResources,
    ) -> Result<(), CriError> {
        let request = UpdateContainerResourcesRequest {
            container_id: container_id.into(),
            linux: Some(linux),
            ..Default::default()
        };
        self.runtime_call(
            "UpdateContainerResources",
            Idempotent::Yes,
            self.config.call_timeout,
            |mut c| {
                let request = request.clone();
                async move { c.update_container_resources(request).await }
            },
        )
        .await
        .map(drop)
    }

    /// The runtime's container event stream (`GetContainerEvents`), where it has one;
    /// An error answer (containerd 1.6: `Unknown: not implemented`) means: poll
    /// `ListContainers` instead.
    ///
    /// No deadline, and not a timed call: containerd 1.7+ (grpc-go) sends the answer's headers
    /// with the first event, so on a quiet node this returns only when something happens.
    pub async fn container_events(
        &self,
    ) -> Result<tonic::Streaming<ContainerEventResponse>, CriError> {
        match self
            .runtime
            .clone()
            .get_container_events(GetEventsRequest {})
            .await
        {
            Ok(response) => Ok(response.into_inner()),
            Err(status) => Err(self.classify("GetContainerEvents", status)),
        }
    }

    async fn runtime_call<T, F, Fut>(
        &self,
        method: &'static str,
        idempotent: Idempotent,
        timeout: Duration,
        call: F,
    ) -> Result<T, CriError>
    where
        F: Fn(RuntimeServiceClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let client = &self.runtime;
        self.with_retries(method, idempotent, || {
            self.timed(method, timeout, call(client.clone()))
        })
        .await
    }

    /// A read-only runtime call whose answer is decoded as `Resp`, a brief view of the real
    /// answer (the same field numbers, fewer fields).
    async fn brief_call<Req, Resp>(
        &self,
        method: &'static str,
        path: &'static str,
        request: Req,
    ) -> Result<Resp, CriError>
    where
        Req: prost::Message + Clone + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        self.with_retries(method, Idempotent::Yes, || {
            let mut grpc = tonic::client::Grpc::new(self.channel.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES);
            let request = request.clone();
            self.timed(method, self.config.call_timeout, async move {
                grpc.ready()
                    .await
                    .map_err(|e| tonic::Status::unknown(format!("Service was not ready: {e}")))?;
                grpc.unary(
                    tonic::Request::new(request),
                    http::uri::PathAndQuery::from_static(path),
                    tonic_prost::ProstCodec::<Req, Resp>::default(),
                )
                .await
            })
        })
        .await
    }

    async fn with_retries<T, F, Fut>(
        &self,
        method: &'static str,
        idempotent: Idempotent,
        attempt: F,
    ) -> Result<T, CriError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, CriError>>,
    {
        let attempts = match idempotent {
            Idempotent::Yes => self.config.max_attempts.max(1),
            Idempotent::No => 1,
        };
        let backoff = ExponentialBuilder::default()
            .with_min_delay(self.config.retry_min_delay)
            .with_max_delay(self.config.retry_max_delay)
            .with_max_times(attempts - 1)
            .with_jitter();
        attempt
            .retry(backoff)
            .when(CriError::is_transient)
            .notify(|err, after| tracing::debug!(method, error = %err, ?after, "retrying CRI call"))
            .await
    }

    async fn timed<T>(
        &self,
        method: &'static str,
        timeout: Duration,
        call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, CriError> {
        let started = Instant::now();
        let result = match tokio::time::timeout(timeout, call).await {
            Err(_) => Err(CriError::Timeout { method, timeout }),
            Ok(Ok(response)) => Ok(response.into_inner()),
            Ok(Err(status)) => Err(self.classify(method, status)),
        };
        if let Some(observer) = &self.observer {
            let code = result
                .as_ref()
                .map_or_else(CriError::code, |_| tonic::Code::Ok);
            observer.observe(method, code, started.elapsed());
        }
        result
    }

    /// Separates "could not talk to the runtime" (transport errors, the runtime restarting) from
    /// answers the runtime gave.
    fn classify(&self, method: &'static str, status: tonic::Status) -> CriError {
        let transport_failure = status.code() == tonic::Code::Unavailable
            || (matches!(status.code(), tonic::Code::Unknown | tonic::Code::Cancelled)
                && std::error::Error::source(&status).is_some());
        if transport_failure {
            CriError::Unavailable {
                endpoint: self.config.endpoint.to_string(),
                method,
                detail: error_chain(&status),
            }
        } else {
            CriError::Call {
                method,
                code: status.code(),
                message: status.message().to_owned(),
            }
        }
    }
}

/// Sends the HTTP/2 client preface and an empty SETTINGS frame; a gRPC server answers with a
/// SETTINGS frame (type 4 at byte 3). Returns the start of the answer when it is something else,
/// `None` when the server is HTTP/2 or nothing could be learned (no connection, no answer).
async fn not_http2(socket: &std::path::Path, timeout: Duration) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0";
    let probe = async {
        let mut stream = UnixStream::connect(socket).await.ok()?;
        stream.write_all(PREFACE).await.ok()?;
        let mut answer = [0u8; 64];
        let mut len = 0;
        while len < 9 {
            match stream.read(&mut answer[len..]).await {
                Ok(0) | Err(_) => break,
                Ok(n) => len += n,
            }
        }
        let answer = &answer[..len];
        let is_settings_frame = answer.len() >= 9 && answer[3] == 0x04;
        (!answer.is_empty() && !is_settings_frame)
            .then(|| String::from_utf8_lossy(answer).trim_end().to_owned())
    };
    tokio::time::timeout(timeout, probe).await.ok().flatten()
}

/// The status message followed by its causes, e.g. "transport error: ... No such file or directory".
fn error_chain(status: &tonic::Status) -> String {
    let mut text = status.message().to_owned();
    let mut source = std::error::Error::source(status);
    while let Some(err) = source {
        let part = err.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = err.source();
    }
    text
}

/// What only the node sandbox and the tests do with a runtime (make sandboxes and containers,
/// look at images): a kubelet's calls, which the agent never makes. Compiled for them alone
/// (feature `test-support`), so the daemon carries none of it.
#[cfg(feature = "test-support")]
impl CriClient {
    /// Image calls here are all reads, hence idempotent.
    async fn image_call<T, F, Fut>(&self, method: &'static str, call: F) -> Result<T, CriError>
    where
        F: Fn(ImageServiceClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let client = ImageServiceClient::new(self.channel.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        self.with_retries(method, Idempotent::Yes, || {
            self.timed(method, self.config.call_timeout, call(client.clone()))
        })
        .await
    }

    pub async fn run_pod_sandbox(&self, config: PodSandboxConfig) -> Result<String, CriError> {
        let request = RunPodSandboxRequest {
            config: Some(config),
            runtime_handler: String::new(),
        };
        let response = self
            .runtime_call(
                "RunPodSandbox",
                Idempotent::No,
                self.config.call_timeout,
                |mut c| {
                    let request = request.clone();
                    async move { c.run_pod_sandbox(request).await }
                },
            )
            .await?;
        Ok(response.pod_sandbox_id)
    }
    /// Stops a sandbox and all its containers (idempotent by the CRI contract).
    pub async fn stop_pod_sandbox(&self, pod_sandbox_id: &str) -> Result<(), CriError> {
        let request = StopPodSandboxRequest {
            pod_sandbox_id: pod_sandbox_id.into(),
        };
        self.runtime_call(
            "StopPodSandbox",
            Idempotent::Yes,
            self.config.call_timeout,
            |mut c| {
                let request = request.clone();
                async move { c.stop_pod_sandbox(request).await }
            },
        )
        .await
        .map(drop)
    }
    /// Removes a sandbox and its containers (idempotent by the CRI contract).
    pub async fn remove_pod_sandbox(&self, pod_sandbox_id: &str) -> Result<(), CriError> {
        let request = RemovePodSandboxRequest {
            pod_sandbox_id: pod_sandbox_id.into(),
        };
        self.runtime_call(
            "RemovePodSandbox",
            Idempotent::Yes,
            self.config.call_timeout,
            |mut c| {
                let request = request.clone();
                async move { c.remove_pod_sandbox(request).await }
            },
        )
        .await
        .map(drop)
    }
    pub async fn create_container(
        &self,
        pod_sandbox_id: &str,
        config: ContainerConfig,
        sandbox_config: PodSandboxConfig,
    ) -> Result<String, CriError> {
        let request = CreateContainerRequest {
            pod_sandbox_id: pod_sandbox_id.into(),
            config: Some(config),
            sandbox_config: Some(sandbox_config),
        };
        let response = self
            .runtime_call(
                "CreateContainer",
                Idempotent::No,
                self.config.call_timeout,
                |mut c| {
                    let request = request.clone();
                    async move { c.create_container(request).await }
                },
            )
            .await?;
        Ok(response.container_id)
    }
    pub async fn start_container(&self, container_id: &str) -> Result<(), CriError> {
        let request = StartContainerRequest {
            container_id: container_id.into(),
        };
        self.runtime_call(
            "StartContainer",
            Idempotent::No,
            self.config.call_timeout,
            |mut c| {
                let request = request.clone();
                async move { c.start_container(request).await }
            },
        )
        .await
        .map(drop)
    }
    pub async fn remove_container(&self, container_id: &str) -> Result<(), CriError> {
        let request = RemoveContainerRequest {
            container_id: container_id.into(),
        };
        self.runtime_call(
            "RemoveContainer",
            Idempotent::Yes,
            self.config.call_timeout,
            |mut c| {
                let request = request.clone();
                async move { c.remove_container(request).await }
            },
        )
        .await
        .map(drop)
    }
    pub async fn image_status(&self, image: &str) -> Result<Option<Image>, CriError> {
        let request = ImageStatusRequest {
            image: Some(ImageSpec {
                image: image.into(),
                ..Default::default()
            }),
            verbose: false,
        };
        let response = self
            .image_call("ImageStatus", |mut c| {
                let request = request.clone();
                async move { c.image_status(request).await }
            })
            .await?;
        Ok(response.image)
    }
    pub async fn list_images(&self) -> Result<Vec<Image>, CriError> {
        let response = self
            .image_call("ListImages", |mut c| async move {
                c.list_images(ListImagesRequest::default()).await
            })
            .await?;
        Ok(response.images)
    }
}
