//! The agent's HTTP endpoints (hyper 1): `/metrics` (OpenMetrics), `/healthz` (the main loop is
//! alive), `/readyz` (pod cache synced and the runtime answering; 503 with the reasons otherwise).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::health::Health;
use crate::metrics::Metrics;

/// Connections served at once; more wait in the listen backlog. Prometheus needs one per
/// scraper and probes one each: the bound keeps a flood of idle connections from using up the
/// agent's file descriptors, which its runtime and API connections and journals need.
const MAX_CONNECTIONS: usize = 64;

/// Serves until the task is dropped or aborted.
pub async fn serve(listener: TcpListener, metrics: Metrics, health: Health) {
    serve_at_most(listener, metrics, health, MAX_CONNECTIONS).await
}

async fn serve_at_most(
    listener: TcpListener,
    metrics: Metrics,
    health: Health,
    connections: usize,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(connections));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(err) => {
                tracing::warn!(error = %err, "accept failed on the metrics/health listener");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let metrics = metrics.clone();
        let health = health.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let response = respond(&request, &metrics, &health);
                async move { Ok::<_, Infallible>(response) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), service);
            if let Err(err) = connection.await {
                tracing::debug!(error = %err, "metrics/health connection ended with an error");
            }
            drop(slot);
        });
    }
}

fn respond<B>(request: &Request<B>, metrics: &Metrics, health: &Health) -> Response<Full<Bytes>> {
    match request.uri().path() {
        "/metrics" => reply(
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            metrics.encode(),
        ),
        "/healthz" => match health.alive() {
            Ok(()) => reply(StatusCode::OK, "text/plain", "ok\n".into()),
            Err(reason) => reply(
                StatusCode::INTERNAL_SERVER_ERROR,
                "text/plain",
                format!("{reason}\n"),
            ),
        },
        "/readyz" => {
            let mut reasons = health.unready_reasons();
            if let Err(reason) = health.alive() {
                reasons.insert(0, format!("main loop: {reason}"));
            }
            if reasons.is_empty() {
                reply(StatusCode::OK, "text/plain", "ok\n".into())
            } else {
                reply(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain",
                    reasons.join("\n") + "\n",
                )
            }
        }
        _ => reply(
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found: try /metrics, /healthz or /readyz\n".into(),
        ),
    }
}

fn reply(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn get(stream: &mut tokio::net::TcpStream) -> String {
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        answer
    }

    #[tokio::test]
    async fn connections_beyond_the_bound_wait_for_a_free_one() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let health = Health::new(crate::health::Heartbeat::default());
        tokio::spawn(serve_at_most(listener, Metrics::new(), health, 2));
        let idle_1 = tokio::net::TcpStream::connect(address).await.unwrap();
        let idle_2 = tokio::net::TcpStream::connect(address).await.unwrap();
        let mut waiting = tokio::net::TcpStream::connect(address).await.unwrap();
        let answer = tokio::spawn(async move { get(&mut waiting).await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!answer.is_finished(), "served beyond the bound");
        drop(idle_1);
        let answer = answer.await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        drop(idle_2);
    }
}
