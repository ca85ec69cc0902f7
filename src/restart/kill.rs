//! One kill: the container's preStop hook within the grace period, then CRI StopContainer with
//! what is left of it (at least two seconds). Never RemoveContainer: kubelet restarts the
//! container it finds exited.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::gate::StopClaim;
use super::hook::{ContainerPort, IntOrString, MIN_STOP_GRACE_SECONDS, PreStop};
use crate::cri::{CriClient, CriError};
use crate::kube::events::{PodEvents, PodRef};

/// One container to stop, and how: what [`kill`] carries out.
#[derive(Clone, Debug, PartialEq)]
pub struct KillOrder {
    pub container: String,
    pub container_id: String,
    pub pre_stop: Option<PreStop>,
    pub ports: Vec<ContainerPort>,
    pub grace: Duration,
    /// Finishes a kill an earlier run of the agent began: no hook, the minimum stop grace.
    pub resumed: bool,
}

impl KillOrder {
    /// The kill `intent` recorded, resumed for `container` after the agent that began it died:
    /// no hook again, the minimum stop grace; ordered once the first attempt's SIGKILL was due
    /// (at `now_ms`, Unix milliseconds), else `Err` with how long until then.
    pub(crate) fn resume(
        intent: &super::KillIntent,
        container: &str,
        now_ms: i64,
    ) -> Result<KillOrder, Duration> {
        let due_ms = intent.started_ms.saturating_add(intent.grace_ms);
        if now_ms < due_ms {
            return Err(Duration::from_millis(
                u64::try_from(due_ms.saturating_sub(now_ms)).unwrap_or(0),
            ));
        }
        Ok(KillOrder {
            container: container.to_owned(),
            container_id: intent.container_id.clone(),
            pre_stop: None,
            ports: Vec::new(),
            grace: Duration::ZERO,
            resumed: true,
        })
    }
}

/// A failed stop: the runtime's StopContainer failed for `container` (its name in the pod).
#[derive(Debug, thiserror::Error)]
#[error("stopping container {container}: {source}")]
pub struct KillError {
    pub container: String,
    pub source: CriError,
}

impl KillError {
    /// The runtime went away mid-call: whether the container was stopped is unknown, so the kill
    /// is not a failure; the journal resumes it if it is still running.
    pub fn transient(&self) -> bool {
        self.source.is_transient()
    }
}

/// Why a preStop hook failed. The stop goes ahead anyway; the message is the pod's
/// `FailedPreStopHook` event, worded as before.
#[derive(Debug, thiserror::Error)]
pub enum PreStopError {
    #[error("preStop hook did not finish within the grace period of {grace:?}")]
    Timeout { grace: Duration },
    #[error("preStop hook has no handler")]
    NoHandler,
    #[error("preStop exec: {0}")]
    Exec(#[source] CriError),
    #[error("preStop exec {command:?} exited with {exit_code}: {stderr}")]
    ExecExited {
        command: Vec<String>,
        exit_code: i32,
        /// The command's stderr, as text, trimmed.
        stderr: String,
    },
    /// `handler` is `httpGet` or `tcpSocket`.
    #[error("preStop {handler}: the pod has no IP yet")]
    NoPodIp { handler: &'static str },
    #[error("preStop: no container port named {name:?}")]
    NoNamedPort { name: String },
    #[error("preStop: invalid port {number}")]
    InvalidPort { number: i32 },
    #[error("preStop: host {host:?} is not an IP address")]
    HostNotIp { host: String },
    #[error("preStop tcpSocket {address}: {source}")]
    TcpConnect {
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error("preStop httpGet: HTTPS is not supported by inplaced")]
    Https,
    #[error("preStop httpGet: header contains a line break")]
    HeaderLineBreak,
    /// Connecting, sending the request or reading the answer failed.
    #[error("preStop httpGet {address}: {source}")]
    Http {
        address: SocketAddr,
        source: std::io::Error,
    },
    /// `head`: the start of the answer, as text.
    #[error("preStop httpGet {address}: not an HTTP answer: {head:?}")]
    NotHttp { address: SocketAddr, head: String },
    #[error("preStop httpGet {address}{path}: HTTP {code}")]
    HttpStatus {
        address: SocketAddr,
        path: String,
        code: u16,
    },
}

/// What happened, for events and metrics.
#[derive(Debug)]
pub struct KillOutcome {
    /// `Some` when the preStop hook failed (the stop went ahead anyway, as kubelet does).
    pub pre_stop_failure: Option<PreStopError>,
    pub pre_stop_took: Duration,
    pub stop_took: Duration,
}

/// How a request's kill ended, reported from its background task to the request loop.
pub(crate) struct KillDone {
    pub request_uid: String,
    pub container: String,
    pub result: Result<(), KillError>,
}

impl KillDone {
    /// How a request loop words the end of a kill for `request_uid`, for [`ReadyKill::launch`].
    ///
    /// [`ReadyKill::launch`]: super::start::ReadyKill::launch
    pub(crate) fn for_request(
        request_uid: String,
    ) -> impl FnOnce(KillOrder, Result<(), KillError>) -> KillDone + Send + 'static {
        move |order, result| KillDone {
            request_uid,
            container: order.container,
            result,
        }
    }
}

/// One request's kills: those under way and those that failed, by container name.
#[derive(Debug, Default)]
pub(crate) struct RequestKills {
    pub killing: HashSet<String>,
    /// Container → why its stop failed: the text written to the request's status as-is.
    pub failed: HashMap<String, String>,
}

impl RequestKills {
    /// Takes in a kill's end. A transient failure (the runtime went away mid-stop) is no
    /// failure: the next pass resumes the kill if the container still runs.
    pub(crate) fn finish(&mut self, container: String, result: Result<(), KillError>) {
        self.killing.remove(&container);
        match result {
            Ok(()) => {}
            Err(err) if err.transient() => {
                tracing::warn!(container = %container, error = %err,
                    "the runtime went away during a stop; the kill is resumed if the container still runs")
            }
            Err(err) => {
                self.failed.insert(container, err.to_string());
            }
        }
    }
}

/// [`kill`], then what every restarter reports of it: the log line naming `cause`, and the pod's
/// `FailedPreStopHook` event when the hook failed (the stop went ahead, as the kubelet does).
pub(crate) async fn kill_and_report(
    cri: &CriClient,
    order: &KillOrder,
    claim: StopClaim,
    pod_ip: Option<&str>,
    events: &PodEvents,
    pod: &PodRef,
    cause: &str,
) -> Result<(), KillError> {
    let outcome = kill(cri, order, claim, pod_ip).await?;
    tracing::info!(container = %order.container, pre_stop = ?outcome.pre_stop_took,
        stop = ?outcome.stop_took, "container stopped for {cause}");
    if let Some(reason) = outcome.pre_stop_failure {
        events.emit(pod, "FailedPreStopHook", reason.to_string(), "Warning");
    }
    Ok(())
}

/// Runs the hook, then stops the container. Errors only when StopContainer itself failed.
/// `claim` must be the gate's claim on `order.container_id`; it is released when this ends.
pub async fn kill(
    cri: &CriClient,
    order: &KillOrder,
    mut claim: StopClaim,
    pod_ip: Option<&str>,
) -> Result<KillOutcome, KillError> {
    debug_assert_eq!(claim.container_id(), order.container_id);
    let started = Instant::now();
    let pre_stop_failure = match &order.pre_stop {
        None => None,
        Some(hook) => {
            match tokio::time::timeout(order.grace, run_pre_stop(cri, order, hook, pod_ip)).await {
                Ok(Ok(())) => None,
                Ok(Err(reason)) => Some(reason),
                Err(_) => Some(PreStopError::Timeout { grace: order.grace }),
            }
        }
    };
    let pre_stop_took = started.elapsed();
    // A resumed kill cannot know whether the first attempt's SIGTERM arrived: send it again
    // with the two-second minimum, then SIGKILL.
    let stop_grace = if order.resumed {
        Duration::from_secs(MIN_STOP_GRACE_SECONDS as u64)
    } else {
        order
            .grace
            .saturating_sub(pre_stop_took)
            .max(Duration::from_secs(MIN_STOP_GRACE_SECONDS as u64))
    };
    let stop_started = Instant::now();
    cri.stop_container(&order.container_id, stop_grace)
        .await
        .map_err(|source| KillError {
            container: order.container.clone(),
            source,
        })?;
    claim.mark_stopped();
    Ok(KillOutcome {
        pre_stop_failure,
        pre_stop_took,
        stop_took: stop_started.elapsed(),
    })
}

async fn run_pre_stop(
    cri: &CriClient,
    order: &KillOrder,
    hook: &PreStop,
    pod_ip: Option<&str>,
) -> Result<(), PreStopError> {
    if let Some(exec) = &hook.exec {
        let result = cri
            .exec_sync(&order.container_id, exec.command.clone(), order.grace)
            .await
            .map_err(PreStopError::Exec)?;
        if result.exit_code != 0 {
            return Err(PreStopError::ExecExited {
                command: exec.command.clone(),
                exit_code: result.exit_code,
                stderr: String::from_utf8_lossy(&result.stderr).trim().to_owned(),
            });
        }
        return Ok(());
    }
    if let Some(http) = &hook.http_get {
        let host = http
            .host
            .as_deref()
            .filter(|h| !h.is_empty())
            .or(pod_ip)
            .ok_or(PreStopError::NoPodIp { handler: "httpGet" })?;
        let port = resolve_port(&http.port, &order.ports)?;
        if http
            .scheme
            .as_deref()
            .is_some_and(|s| s.eq_ignore_ascii_case("https"))
        {
            return Err(PreStopError::Https);
        }
        let path = http
            .path
            .as_deref()
            .filter(|p| !p.is_empty())
            .unwrap_or("/");
        let headers: Vec<(&str, &str)> = http
            .http_headers
            .iter()
            .map(|h| (h.name.as_str(), h.value.as_str()))
            .collect();
        return http_get(host, port, path, &headers).await;
    }
    if let Some(tcp) = &hook.tcp_socket {
        let host = tcp
            .host
            .as_deref()
            .filter(|h| !h.is_empty())
            .or(pod_ip)
            .ok_or(PreStopError::NoPodIp {
                handler: "tcpSocket",
            })?;
        let port = resolve_port(&tcp.port, &order.ports)?;
        let address = socket_address(host, port)?;
        TcpStream::connect(address)
            .await
            .map(drop)
            .map_err(|source| PreStopError::TcpConnect { address, source })?;
        return Ok(());
    }
    if let Some(sleep) = &hook.sleep {
        tokio::time::sleep(Duration::from_secs(
            u64::try_from(sleep.seconds).unwrap_or(0),
        ))
        .await;
        return Ok(());
    }
    Err(PreStopError::NoHandler)
}

/// A named port resolves through the container's ports, as kubelet does.
fn resolve_port(port: &IntOrString, ports: &[ContainerPort]) -> Result<u16, PreStopError> {
    let number = match port {
        IntOrString::Int(n) => *n,
        IntOrString::String(name) => match name.parse::<i32>() {
            Ok(n) => n,
            Err(_) => ports
                .iter()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .map(|p| p.container_port)
                .ok_or_else(|| PreStopError::NoNamedPort { name: name.clone() })?,
        },
    };
    u16::try_from(number)
        .ok()
        .filter(|p| *p > 0)
        .ok_or(PreStopError::InvalidPort { number })
}

fn socket_address(host: &str, port: u16) -> Result<SocketAddr, PreStopError> {
    let ip: std::net::IpAddr = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .map_err(|_| PreStopError::HostNotIp {
            host: host.to_owned(),
        })?;
    Ok(SocketAddr::new(ip, port))
}

/// A plain HTTP/1.1 GET; success is a status below 400, as for kubelet's hooks.
async fn http_get(
    host: &str,
    port: u16,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<(), PreStopError> {
    let address = socket_address(host, port)?;
    let mut stream = TcpStream::connect(address)
        .await
        .map_err(|source| PreStopError::Http { address, source })?;
    let mut request = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: inplaced\r\nConnection: close\r\n"
    );
    for (name, value) in headers {
        if name.contains(['\r', '\n']) || value.contains(['\r', '\n']) {
            return Err(PreStopError::HeaderLineBreak);
        }
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|source| PreStopError::Http { address, source })?;
    let mut head = [0u8; 32];
    let n = stream
        .read(&mut head)
        .await
        .map_err(|source| PreStopError::Http { address, source })?;
    let line = String::from_utf8_lossy(&head[..n]);
    let code: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| PreStopError::NotHttp {
            address,
            head: line.to_string(),
        })?;
    if code < 400 {
        Ok(())
    } else {
        Err(PreStopError::HttpStatus {
            address,
            path: path.to_owned(),
            code,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_resolve_by_number_or_name() {
        let ports = vec![ContainerPort {
            name: Some("http".into()),
            container_port: 8080,
        }];
        assert_eq!(resolve_port(&IntOrString::Int(80), &ports).unwrap(), 80);
        assert_eq!(
            resolve_port(&IntOrString::String("http".into()), &ports).unwrap(),
            8080
        );
        assert_eq!(
            resolve_port(&IntOrString::String("81".into()), &ports).unwrap(),
            81
        );
        assert!(resolve_port(&IntOrString::String("grpc".into()), &ports).is_err());
        assert!(resolve_port(&IntOrString::Int(70000), &ports).is_err());
        assert!(resolve_port(&IntOrString::Int(0), &ports).is_err());
    }

    /// The words of the request's status (a failed stop) and of `FailedPreStopHook` events.
    #[test]
    fn failures_keep_their_words() {
        let err = KillError {
            container: "app".into(),
            source: CriError::Timeout {
                method: "StopContainer",
                timeout: Duration::from_secs(2),
            },
        };
        assert_eq!(
            err.to_string(),
            "stopping container app: CRI StopContainer timed out after 2s"
        );
        assert!(err.transient());
        assert_eq!(
            PreStopError::Timeout {
                grace: Duration::from_secs(30)
            }
            .to_string(),
            "preStop hook did not finish within the grace period of 30s"
        );
        assert_eq!(
            resolve_port(&IntOrString::String("grpc".into()), &[])
                .unwrap_err()
                .to_string(),
            "preStop: no container port named \"grpc\""
        );
        assert_eq!(
            resolve_port(&IntOrString::Int(-1), &[])
                .unwrap_err()
                .to_string(),
            "preStop: invalid port -1"
        );
        assert_eq!(
            socket_address("web", 80).unwrap_err().to_string(),
            "preStop: host \"web\" is not an IP address"
        );
    }

    #[tokio::test]
    async fn http_get_succeeds_below_400_and_fails_otherwise() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            for status in ["204 No Content", "503 Service Unavailable"] {
                let (mut stream, _) = listener.accept().await.unwrap();
                let mut buf = [0u8; 1024];
                let n = stream.read(&mut buf).await.unwrap();
                assert!(String::from_utf8_lossy(&buf[..n]).starts_with("GET /drain HTTP/1.1\r\n"));
                let answer = format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\n\r\n");
                stream.write_all(answer.as_bytes()).await.unwrap();
            }
        });
        http_get("127.0.0.1", port, "/drain", &[("X-A", "b")])
            .await
            .unwrap();
        let err = http_get("127.0.0.1", port, "/drain", &[])
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("HTTP 503"), "{err}");
        server.await.unwrap();
        assert!(
            http_get("127.0.0.1", port, "/", &[("a\r\nb", "c")])
                .await
                .is_err()
        );
    }
}
