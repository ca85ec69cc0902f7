//! A tower layer under the kube client: times every API request by verb, resource and status
//! code, holds requests to a token-bucket rate (client-go's QPS/burst) so that a busy agent
//! never floods the API server, and fails a request whose answer does not begin within the
//! answer deadline, so that a request lost on the way (a connection that died without a reset,
//! a proxy that swallowed it) is an error its caller retries instead of a wait without end.
//! The deadline covers the response's head only: a watch's head comes at once and its stream
//! may then stay quiet for minutes.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::{Request, Response};
use tower::{Layer, Service};

use super::ApiMetrics;
use crate::metrics::Metrics;

#[derive(Clone)]
pub struct ApiLayer {
    metrics: ApiMetrics,
    bucket: Arc<Mutex<TokenBucket>>,
    answer_deadline: Duration,
}

impl ApiLayer {
    pub fn new(metrics: Metrics, qps: u32, burst: u32, answer_deadline: Duration) -> Self {
        Self {
            metrics: metrics.families(),
            bucket: Arc::new(Mutex::new(TokenBucket::new(qps.max(1), burst.max(1)))),
            answer_deadline,
        }
    }
}

/// A request whose answer did not begin within the answer deadline.
#[derive(Debug, thiserror::Error)]
#[error("the API server did not begin to answer within {0:?}")]
pub(crate) struct NoAnswer(pub Duration);

impl<S> Layer<S> for ApiLayer {
    type Service = ApiService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        ApiService {
            inner,
            metrics: self.metrics.clone(),
            bucket: self.bucket.clone(),
            answer_deadline: self.answer_deadline,
            wait: None,
            admitted: false,
        }
    }
}

pub struct ApiService<S> {
    inner: S,
    metrics: ApiMetrics,
    bucket: Arc<Mutex<TokenBucket>>,
    answer_deadline: Duration,
    wait: Option<Pin<Box<tokio::time::Sleep>>>,
    admitted: bool,
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for ApiService<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
    S::Error: Into<tower::BoxError>,
{
    type Response = S::Response;
    type Error = tower::BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, tower::BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        while !self.admitted {
            if let Some(wait) = self.wait.as_mut() {
                if wait.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.wait = None;
            }
            let delay = match self.bucket.lock() {
                Ok(mut bucket) => bucket.take(Instant::now()),
                Err(_) => None, // a poisoned bucket must not stop the agent: admit
            };
            match delay {
                None => self.admitted = true,
                Some(delay) => self.wait = Some(Box::pin(tokio::time::sleep(delay))),
            }
        }
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        self.admitted = false;
        let (verb, resource) = classify(request.method(), request.uri());
        let metrics = self.metrics.clone();
        let started = Instant::now();
        let deadline = self.answer_deadline;
        let response = self.inner.call(request);
        Box::pin(async move {
            let result = match tokio::time::timeout(deadline, response).await {
                Ok(answer) => answer.map_err(Into::into),
                Err(_) => {
                    tracing::warn!(
                        verb,
                        resource,
                        ?deadline,
                        "an API request got no answer in time; it fails and is retried"
                    );
                    Err(NoAnswer(deadline).into())
                }
            };
            let code = result.as_ref().map_or(0, |r| r.status().as_u16());
            metrics.observe_request(verb, &resource, code, started.elapsed());
            result
        })
    }
}

/// Tokens refill at `rate` per second up to `burst`.
struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    fn new(rate: u32, burst: u32) -> Self {
        Self {
            rate: f64::from(rate),
            burst: f64::from(burst),
            tokens: f64::from(burst),
            last: Instant::now(),
        }
    }

    /// Takes a token, or says how long until one is available.
    fn take(&mut self, now: Instant) -> Option<Duration> {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            None
        } else {
            Some(Duration::from_secs_f64((1.0 - self.tokens) / self.rate))
        }
    }
}

/// The API verb and resource (with subresource) of a request, in the API server's own terms:
/// a bounded label set, never object names.
fn classify(method: &http::Method, uri: &http::Uri) -> (&'static str, String) {
    let segments: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
    // /api/v1/... or /apis/<group>/<version>/...
    let rest: &[&str] = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        other => {
            let what = other.first().copied().unwrap_or("root");
            return ("get", what.to_string());
        }
    };
    let rest = match rest {
        ["namespaces", _ns, tail @ ..] if !tail.is_empty() => tail,
        other => other,
    };
    let (resource, named, subresource) = match rest {
        [] => ("discovery".to_string(), false, None),
        [resource] => (resource.to_string(), false, None),
        [resource, _name] => (resource.to_string(), true, None),
        [resource, _name, sub, ..] => (resource.to_string(), true, Some(*sub)),
    };
    let watching = uri
        .query()
        .is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
    let verb = match *method {
        http::Method::GET if watching => "watch",
        http::Method::GET if named => "get",
        http::Method::GET => "list",
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE => "delete",
        _ => "other",
    };
    let resource = match subresource {
        Some(sub) => format!("{resource}/{sub}"),
        None => resource,
    };
    (verb, resource)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verb_and_resource(method: &str, uri: &str) -> (&'static str, String) {
        classify(&method.parse().unwrap(), &uri.parse().unwrap())
    }

    #[test]
    fn classifies_requests_like_the_api_server_audit_log() {
        let cases = [
            (
                "GET",
                "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1&resourceVersion=0",
                "list",
                "pods",
            ),
            (
                "GET",
                "/api/v1/pods?watch=true&resourceVersion=12",
                "watch",
                "pods",
            ),
            (
                "GET",
                "/api/v1/namespaces/default/pods/web-0",
                "get",
                "pods",
            ),
            (
                "PATCH",
                "/api/v1/namespaces/default/pods/web-0/status",
                "patch",
                "pods/status",
            ),
            (
                "PATCH",
                "/api/v1/namespaces/default/pods/web-0/resize",
                "patch",
                "pods/resize",
            ),
            (
                "POST",
                "/api/v1/namespaces/default/events",
                "create",
                "events",
            ),
            (
                "PUT",
                "/apis/apps.kruise.io/v1alpha1/namespaces/ns/containerrecreaterequests/crr-1/status",
                "update",
                "containerrecreaterequests/status",
            ),
            ("GET", "/api/v1/nodes/n1", "get", "nodes"),
            ("GET", "/version", "get", "version"),
        ];
        for (method, uri, verb, resource) in cases {
            assert_eq!(
                verb_and_resource(method, uri),
                (verb, resource.to_string()),
                "{method} {uri}"
            );
        }
    }

    /// A request the server never answers fails at the deadline (recorded with code 0); one
    /// whose answer begins in time passes.
    #[tokio::test]
    async fn a_request_without_an_answer_fails_at_the_deadline() {
        use tower::ServiceExt;
        let deadline = Duration::from_millis(300);
        let metrics = Metrics::new();
        let layer = ApiLayer::new(metrics.clone(), 50, 100, deadline);
        let request = || {
            Request::patch("/api/v1/namespaces/ns/pods/p/status")
                .body(())
                .unwrap()
        };

        let silent = tower::service_fn(|_: Request<()>| {
            std::future::pending::<Result<Response<()>, std::convert::Infallible>>()
        });
        let started = Instant::now();
        let answer = tokio::time::timeout(
            Duration::from_secs(20),
            layer.layer(silent).oneshot(request()),
        )
        .await
        .expect("the layer gave up at its deadline, not the test");
        let error = answer.expect_err("no answer is an error");
        assert!(error.downcast_ref::<NoAnswer>().is_some(), "{error}");
        assert!(started.elapsed() >= deadline);
        let text = metrics.encode();
        assert!(
            text.contains(r#"inplaced_api_request_duration_seconds_count{verb="patch",resource="pods/status",code="0"} 1"#),
            "{text}"
        );

        let prompt = tower::service_fn(|_: Request<()>| async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            Ok::<_, std::convert::Infallible>(Response::new(()))
        });
        let answer = layer.layer(prompt).oneshot(request()).await;
        assert!(answer.is_ok(), "an answer in time passes");
    }

    #[test]
    fn bucket_allows_a_burst_then_paces_at_the_rate() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(5, 3);
        bucket.last = start;
        for _ in 0..3 {
            assert_eq!(bucket.take(start), None);
        }
        let wait = bucket.take(start).expect("burst used up");
        assert!((wait.as_secs_f64() - 0.2).abs() < 1e-9, "{wait:?}");
        assert_eq!(bucket.take(start + Duration::from_millis(200)), None);
    }
}
