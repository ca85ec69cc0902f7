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
use crate::cri::CriClient;
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

/// A failed stop. Transient means the runtime went away mid-call: whether the container was
/// stopped is unknown, so the kill is not a failure; the journal resumes it if it is still running.
#[derive(Debug)]
pub struct KillError {
    pub transient: bool,
    pub message: String,
}

/// What happened, for events and metrics.
#[derive(Debug)]
pub struct KillOutcome {
    /// `Some(reason)` when the preStop hook failed (the stop went ahead anyway, as kubelet does).
    pub pre_stop_failure: Option<String>,
    pub pre_stop_took: Duration,
    pub stop_took: Duration,
}

/// How a request's kill ended, reported from its background task to the request loop.
pub(crate) struct KillDone {
    pub request_uid: String,
    pub container: String,
    pub result: Result<(), KillError>,
}

/// One request's kills: those under way and those that failed, by container name.
#[derive(Debug, Default)]
pub(crate) struct RequestKills {
    pub killing: HashSet<String>,
    /// Container → why its stop failed.
    pub failed: HashMap<String, String>,
}

impl RequestKills {
    /// Takes in a kill's end. A transient failure (the runtime went away mid-stop) is no
    /// failure: the next pass resumes the kill if the container still runs.
    pub(crate) fn finish(&mut self, container: String, result: Result<(), KillError>) {
        self.killing.remove(&container);
        match result {
            Ok(()) => {}
            Err(err) if err.transient => {
                tracing::warn!(container = %container, error = %err.message,
                    "the runtime went away during a stop; the kill is resumed if the container still runs")
            }
            Err(err) => {
                self.failed.insert(container, err.message);
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
        events.emit(pod, "FailedPreStopHook", reason, "Warning");
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
                Err(_) => Some(format!(
                    "preStop hook did not finish within the grace period of {:?}",
                    order.grace
                )),
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
        .map_err(|e| KillError {
            transient: e.is_transient(),
            message: format!("stopping container {}: {e}", order.container),
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
) -> Result<(), String> {
    if let Some(exec) = &hook.exec {
        let result = cri
            .exec_sync(&order.container_id, exec.command.clone(), order.grace)
            .await
            .map_err(|e| format!("preStop exec: {e}"))?;
        if result.exit_code != 0 {
            return Err(format!(
                "preStop exec {:?} exited with {}: {}",
                exec.command,
                result.exit_code,
                String::from_utf8_lossy(&result.stderr).trim()
            ));
        }
        return Ok(());
    }
    if let Some(http) = &hook.http_get {
        let host = http
            .host
            .as_deref()
            .filter(|h| !h.is_empty())
            .or(pod_ip)
            .ok_or("preStop httpGet: the pod has no IP yet")?;
        let port = resolve_port(&http.port, &order.ports)?;
        if http
            .scheme
            .as_deref()
            .is_some_and(|s| s.eq_ignore_ascii_case("https"))
        {
            return Err("preStop httpGet: HTTPS is not supported by inplaced".into());
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
            .ok_or("preStop tcpSocket: the pod has no IP yet")?;
        let port = resolve_port(&tcp.port, &order.ports)?;
        let address = socket_address(host, port)?;
        TcpStream::connect(address)
            .await
            .map(drop)
            .map_err(|e| format!("preStop tcpSocket {address}: {e}"))?;
        return Ok(());
    }
    if let Some(sleep) = &hook.sleep {
        tokio::time::sleep(Duration::from_secs(
            u64::try_from(sleep.seconds).unwrap_or(0),
        ))
        .await;
        return Ok(());
    }
    Err("preStop hook has no handler".into())
}

/// A named port resolves through the container's ports, as kubelet does.
fn resolve_port(port: &IntOrString, ports: &[ContainerPort]) -> Result<u16, String> {
    let number = match port {
        IntOrString::Int(n) => *n,
        IntOrString::String(name) => match name.parse::<i32>() {
            Ok(n) => n,
            Err(_) => ports
                .iter()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .map(|p| p.container_port)
                .ok_or_else(|| format!("preStop: no container port named {name:?}"))?,
        },
    };
    u16::try_from(number)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("preStop: invalid port {number}"))
}

fn socket_address(host: &str, port: u16) -> Result<SocketAddr, String> {
    let ip: std::net::IpAddr = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .map_err(|_| format!("preStop: host {host:?} is not an IP address"))?;
    Ok(SocketAddr::new(ip, port))
}

/// A plain HTTP/1.1 GET; success is a status below 400, as for kubelet's hooks.
async fn http_get(
    host: &str,
    port: u16,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<(), String> {
    let address = socket_address(host, port)?;
    let mut stream = TcpStream::connect(address)
        .await
        .map_err(|e| format!("preStop httpGet {address}: {e}"))?;
    let mut request = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: inplaced\r\nConnection: close\r\n"
    );
    for (name, value) in headers {
        if name.contains(['\r', '\n']) || value.contains(['\r', '\n']) {
            return Err("preStop httpGet: header contains a line break".into());
        }
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| format!("preStop httpGet {address}: {e}"))?;
    let mut head = [0u8; 32];
    let n = stream
        .read(&mut head)
        .await
        .map_err(|e| format!("preStop httpGet {address}: {e}"))?;
    let line = String::from_utf8_lossy(&head[..n]);
    let code: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("preStop httpGet {address}: not an HTTP answer: {line:?}"))?;
    if code < 400 {
        Ok(())
    } else {
        Err(format!("preStop httpGet {address}{path}: HTTP {code}"))
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
        assert_eq!(resolve_port(&IntOrString::Int(80), &ports), Ok(80));
        assert_eq!(
            resolve_port(&IntOrString::String("http".into()), &ports),
            Ok(8080)
        );
        assert_eq!(
            resolve_port(&IntOrString::String("81".into()), &ports),
            Ok(81)
        );
        assert!(resolve_port(&IntOrString::String("grpc".into()), &ports).is_err());
        assert!(resolve_port(&IntOrString::Int(70000), &ports).is_err());
        assert!(resolve_port(&IntOrString::Int(0), &ports).is_err());
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
        assert_eq!(
            http_get("127.0.0.1", port, "/drain", &[("X-A", "b")]).await,
            Ok(())
        );
        let err = http_get("127.0.0.1", port, "/drain", &[])
            .await
            .unwrap_err();
        assert!(err.contains("HTTP 503"), "{err}");
        server.await.unwrap();
        assert!(
            http_get("127.0.0.1", port, "/", &[("a\r\nb", "c")])
                .await
                .is_err()
        );
    }
}
