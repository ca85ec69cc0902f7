//! The agent's watches: the pods bound to this node, the node object, and the request objects
//! the controllers handle. Each is a kube-rs watcher feeding a reflector store, driven by one
//! loop ([`drive`]) that resumes after errors, relists promptly after 410 Gone, and reports a
//! watch that keeps failing in `/readyz`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ::kube::api::{ApiResource, DynamicObject};
use ::kube::runtime::reflector::{self, Store};
use ::kube::runtime::{WatchStreamExt, watcher};
use ::kube::{Api, Client};
use futures::{FutureExt, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use tokio::sync::watch;

use super::CachedPod;
use crate::health::Health;
use crate::metrics::Metrics;
use crate::resources::Resources;

/// The pods bound to this node, kept current by a watch; `changes` ticks on every change.
#[derive(Clone)]
pub struct NodePods {
    pub store: Store<CachedPod>,
    pub changes: watch::Receiver<u64>,
}

/// The node object (for the kubelet's version), kept current by a watch; `changes` ticks on
/// every change.
#[derive(Clone)]
pub struct NodeObject {
    pub store: Store<Node>,
    pub changes: watch::Receiver<u64>,
}

impl NodeObject {
    /// The kubelet version the node reports in `status.nodeInfo.kubeletVersion`.
    pub fn kubelet_version(&self) -> Option<String> {
        let nodes = self.store.state();
        let node = nodes.first()?;
        let version = node
            .status
            .as_ref()?
            .node_info
            .as_ref()?
            .kubelet_version
            .clone();
        (!version.is_empty()).then_some(version)
    }

    /// `status.allocatable` cpu and memory, in the request fields of [`Resources`]; a value
    /// that is missing or cannot be read is left unset (and so not checked).
    pub fn allocatable(&self) -> Option<Resources> {
        let nodes = self.store.state();
        let allocatable = nodes.first()?.status.as_ref()?.allocatable.as_ref()?;
        let mut resources = Resources::default();
        for key in ["cpu", "memory"] {
            let Some(quantity) = allocatable.get(key) else {
                continue;
            };
            let one = serde_json::json!({ "requests": { key: quantity } });
            match Resources::from_requirements(&one) {
                Ok(r) => {
                    resources.cpu_request = resources.cpu_request.or(r.cpu_request);
                    resources.memory_request = resources.memory_request.or(r.memory_request);
                }
                // Read on every pass of the main loop: debug, not a warning each second.
                Err(err) => {
                    tracing::debug!(error = %err, "the node's allocatable {key} cannot be read")
                }
            }
        }
        Some(resources)
    }
}

/// Starts watching the pods whose `spec.nodeName` is `node_name`. The initial list may be served
/// from the API server's watch cache (resourceVersion "0"): on a fleet of thousands of nodes
/// that keeps the agents off etcd. The watch backs off on errors, resumes from its last
/// resourceVersion, and relists on 410 Gone; the store survives all of it.
pub fn watch_node_pods(
    client: Client,
    node_name: &str,
    metrics: Metrics,
    health: Health,
    startup_jitter: Duration,
) -> (NodePods, impl Future<Output = ()> + Send + 'static) {
    let (reader, writer) = reflector::store();
    let (tick, changes) = watch::channel(0u64);
    let mut config = watcher::Config::default()
        .fields(&format!("spec.nodeName={node_name}"))
        .any_semantic();
    // kube-rs drops resourceVersion=0 from paged lists; one node's pods fit in one page.
    config.page_size = None;
    // Decoded straight into the cache's lean form: a full pod is never built.
    let api: Api<CachedPod> = Api::all(client);
    let stream = relist_promptly(watcher(api, config)).reflect(writer);
    let task = drive(
        stream,
        PODS,
        metrics,
        health,
        startup_jitter,
        Arc::new(tick),
        None,
    );
    (
        NodePods {
            store: reader,
            changes,
        },
        task,
    )
}

/// Starts watching this node's own Node object.
pub fn watch_node(
    client: Client,
    node_name: &str,
    metrics: Metrics,
    health: Health,
) -> (NodeObject, impl Future<Output = ()> + Send + 'static) {
    let (reader, writer) = reflector::store();
    let (tick, changes) = watch::channel(0u64);
    let mut config = watcher::Config::default()
        .fields(&format!("metadata.name={node_name}"))
        .any_semantic();
    config.page_size = None;
    let api: Api<Node> = Api::all(client);
    let stream = relist_promptly(watcher(api, config)).reflect(writer);
    let task = drive(
        stream,
        NODES,
        metrics,
        health,
        Duration::ZERO,
        Arc::new(tick),
        None,
    );
    (
        NodeObject {
            store: reader,
            changes,
        },
        task,
    )
}

/// A watch of `api`'s objects (one namespace's, those matching `labels` if given) while the
/// returned task runs: the store, and whether its first list has arrived; `on_event` is called
/// after each change is in the store. For the short-lived watches of a piece of work (a
/// rollout's census): errors are logged (the repeat limit keeps them brief), not counted in the
/// agent's readiness, and the watch backs off and resumes as the others do. `what` names it in
/// the logs.
pub fn watch_namespaced<K>(
    api: Api<K>,
    dynamic: K::DynamicType,
    labels: Option<&str>,
    what: &'static str,
    on_event: impl Fn() + Send + 'static,
) -> (
    Store<K>,
    Arc<AtomicBool>,
    impl Future<Output = ()> + Send + 'static,
)
where
    K: ::kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    K::DynamicType: Clone + Eq + std::hash::Hash + Send + Sync,
{
    let writer = reflector::store::Writer::new(dynamic);
    let reader = writer.as_reader();
    let listed = Arc::new(AtomicBool::new(false));
    let seen = listed.clone();
    let namespace = api.namespace().unwrap_or_default().to_string();
    // From the watch cache, unpaged (the API server ignores a limit with resourceVersion 0, as
    // it does for client-go's informers).
    let mut config = watcher::Config::default().any_semantic();
    config.page_size = None;
    if let Some(labels) = labels {
        config = config.labels(labels);
    }
    let stream = relist_promptly(watcher(api, config)).reflect(writer);
    let task = async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(item) = stream.next().await {
            match item {
                Ok(watcher::Event::InitDone) => {
                    seen.store(true, Ordering::Relaxed);
                    on_event();
                }
                Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) => on_event(),
                Ok(_) => {}
                Err(err) => {
                    let forbidden = match &err {
                        watcher::Error::InitialListFailed(::kube::Error::Api(s))
                        | watcher::Error::WatchStartFailed(::kube::Error::Api(s))
                        | watcher::Error::WatchFailed(::kube::Error::Api(s)) => s.code == 403,
                        watcher::Error::WatchError(s) => s.code == 403,
                        _ => false,
                    };
                    let hint = if forbidden {
                        " (the agent's identity may not watch them: rbac-dedicated.yaml grants it)"
                    } else {
                        ""
                    };
                    tracing::warn!(namespace = %namespace, error = %err,
                        "cannot watch the namespace's {what}{hint}; tried again");
                }
            }
        }
    };
    (reader, listed, task)
}

/// The watcher's default backoff, except that a 410 Gone (the watch's resourceVersion expired:
/// relist) starts it over. A 410 is the API server answering, typically its first answer after
/// an outage; before, it cost one more step of a backoff grown to 30 s during the outage, so
/// the cache followed the API again up to a minute after the server was back. A 410 in a loop
/// still waits the first step (800 ms, jittered) each time.
///
/// And the backoff starts over only after progress: kube-rs's watcher yields `Event::Init`
/// *before* its list request, and the backoff layer resets on any `Ok`, so a list that keeps
/// failing (a CRD not installed: 404; an API server answering 500) would be retried every
/// 800 ms forever instead of backing off to 30 s.
struct RelistBackoff {
    inner: watcher::DefaultBackoff,
    expired: Arc<AtomicBool>,
    progressed: Arc<AtomicBool>,
}

impl Iterator for RelistBackoff {
    type Item = Duration;
    fn next(&mut self) -> Option<Duration> {
        if self.expired.swap(false, Ordering::Relaxed) {
            ::kube::runtime::utils::Backoff::reset(&mut self.inner);
        }
        self.inner.next()
    }
}

impl ::kube::runtime::utils::Backoff for RelistBackoff {
    /// Called by the backoff layer on every `Ok`; only an answer of the API server (a listed
    /// object, the end of the list, a watch event) counts.
    fn reset(&mut self) {
        if self.progressed.swap(false, Ordering::Relaxed) {
            ::kube::runtime::utils::Backoff::reset(&mut self.inner);
        }
    }
}

/// `stream` with [`RelistBackoff`].
fn relist_promptly<K>(
    stream: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
) -> impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send {
    let expired = Arc::new(AtomicBool::new(false));
    let progressed = Arc::new(AtomicBool::new(false));
    let (seen_expiry, seen_progress) = (expired.clone(), progressed.clone());
    // Runs on each item before the backoff layer sees it.
    let stream = stream.inspect(move |item| match item {
        Err(watcher::Error::WatchError(status)) if status.code == 410 => {
            seen_expiry.store(true, Ordering::Relaxed)
        }
        Ok(event) if !matches!(event, watcher::Event::Init) => {
            seen_progress.store(true, Ordering::Relaxed)
        }
        _ => {}
    });
    stream.backoff(RelistBackoff {
        inner: watcher::DefaultBackoff::default(),
        expired,
        progressed,
    })
}

/// A watch failing without a success in between for this long makes the agent unready: its
/// cache, and every decision taken from it, no longer follows the API.
const WATCH_FAILING_UNREADY: Duration = Duration::from_secs(60);

/// No error for this long after errors: the watch works again.
const WATCH_QUIET_AFTER_ERRORS: Duration = Duration::from_secs(45);

/// What a watch is of, for its metric, its readiness reason and its logs.
#[derive(Clone, Copy, Debug)]
pub struct Watched {
    /// The resource's plural name: the `resource` label of `inplaced_watch_restarts_total`.
    pub resource: &'static str,
    /// Its readiness reason's name in `/readyz`.
    pub health_key: &'static str,
    /// Where the resource is optional (a CRD the cluster may not have): what a 404 means, said
    /// once; until it is served the watch keeps trying and the agent stays ready.
    pub when_not_served: Option<&'static str>,
}

const PODS: Watched = Watched {
    resource: "pods",
    health_key: "pods watch",
    when_not_served: None,
};

const NODES: Watched = Watched {
    resource: "nodes",
    health_key: "node watch",
    when_not_served: None,
};

/// The HTTP status of the API server's answer behind a watcher error, if it answered one.
fn answer_code(err: &watcher::Error) -> Option<u16> {
    match err {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => match e {
            ::kube::Error::Api(status) => Some(status.code),
            _ => None,
        },
        watcher::Error::WatchError(status) => Some(status.code),
        watcher::Error::NoResourceVersion => None,
    }
}

/// The API server does not serve the resource (its CRD is not installed).
fn not_served(err: &watcher::Error) -> bool {
    answer_code(err) == Some(404)
}

/// Waits until the API server serves a resource it answered 404 for (see [`until_crd_serves`]).
type UntilServed = Box<dyn FnMut() -> futures::future::BoxFuture<'static, ()> + Send>;

/// Without the right to watch CustomResourceDefinitions (a role from before that rule), how
/// often the agent asks again whether a resource is served: one request per kind and agent.
const NOT_SERVED_RECHECK: Duration = Duration::from_secs(300);

/// The CustomResourceDefinitions resource, as `inplaced_watch_restarts_total` names it.
const CRDS: &str = "customresourcedefinitions";

/// Returns once the API server serves `version` of the custom resource whose
/// CustomResourceDefinition is named `crd` (`plural.group`): the CRD exists, is not being
/// deleted, is Established, and serves that version. It watches that one CRD by name, so a
/// cluster without it costs one watch per agent and kind (re-opened every few minutes, like
/// every watch), whatever the size of the fleet, and the agent starts handling the kind as soon
/// as the CRD is applied. Where the agent may not watch CRDs (403), it returns after
/// [`NOT_SERVED_RECHECK`] instead, and the caller asks the resource itself again.
async fn until_crd_serves(client: Client, crd: String, version: String, metrics: Metrics) {
    let api: Api<CustomResourceDefinition> = Api::all(client);
    let mut config = watcher::Config::default()
        .fields(&format!("metadata.name={crd}"))
        .any_semantic();
    config.page_size = None;
    let mut stream = std::pin::pin!(relist_promptly(watcher(api, config)));
    while let Some(item) = stream.next().await {
        match item {
            Ok(watcher::Event::Apply(object) | watcher::Event::InitApply(object))
                if crd_serves(&object, &version) =>
            {
                return;
            }
            Ok(_) => {}
            Err(err) if answer_code(&err) == Some(403) => {
                tracing::warn!(
                    crd,
                    error = %err,
                    "may not watch CustomResourceDefinitions (apply the shipped RBAC): asking the API server again every {} minutes whether it serves the resource",
                    NOT_SERVED_RECHECK.as_secs() / 60
                );
                tokio::time::sleep(NOT_SERVED_RECHECK).await;
                return;
            }
            Err(err) => {
                metrics
                    .families::<super::ApiMetrics>()
                    .count_watch_restart(CRDS);
                tracing::warn!(crd, error = %err, "CustomResourceDefinition watch failed; backing off and resuming");
            }
        }
    }
}

/// The CRD is Established, not being deleted, and serves `version`.
fn crd_serves(crd: &CustomResourceDefinition, version: &str) -> bool {
    let established = crd
        .status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        });
    let serves_version = crd
        .spec
        .versions
        .iter()
        .any(|v| v.name == version && v.served);
    established && serves_version && crd.metadata.deletion_timestamp.is_none()
}

/// Runs a watch stream to its end: counts its restarts, ticks `tick` on every event, and makes
/// the agent unready while it has failed for [`WATCH_FAILING_UNREADY`] without a success. An
/// optional resource that is not served (404) is not asked for again until `until_served`
/// returns: the stream is simply not polled meanwhile.
async fn drive<S, K>(
    stream: S,
    watched: Watched,
    metrics: Metrics,
    health: Health,
    startup_jitter: Duration,
    tick: Arc<watch::Sender<u64>>,
    mut until_served: Option<UntilServed>,
) where
    S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
{
    let Watched {
        resource,
        health_key: key,
        when_not_served,
    } = watched;
    let mut said_not_served = false;
    if !startup_jitter.is_zero() {
        tokio::time::sleep(startup_jitter.mul_f64(rand::random_range(0.0..1.0))).await;
    }
    let mut stream = std::pin::pin!(stream);
    let mut failing_since: Option<tokio::time::Instant> = None;
    loop {
        // A watch that works again is quiet on a quiet node: no error for longer than the
        // watcher's longest backoff (30 s) means it works.
        let next = match failing_since {
            Some(_) => match tokio::time::timeout(WATCH_QUIET_AFTER_ERRORS, stream.next()).await {
                Ok(next) => next,
                Err(_) => {
                    failing_since = None;
                    health.set(key, Ok(()));
                    continue;
                }
            },
            None => stream.next().await,
        };
        let Some(item) = next else { break };
        match item {
            // Said before the list request: not an answer of the API server.
            Ok(watcher::Event::Init) => {}
            Ok(_) => {
                if failing_since.take().is_some() {
                    health.set(key, Ok(()));
                }
                if std::mem::take(&mut said_not_served) {
                    tracing::info!(resource, "the API server serves it now; watching");
                }
                tick.send_modify(|n| *n = n.wrapping_add(1));
            }
            Err(err) if when_not_served.is_some() && not_served(&err) => {
                metrics
                    .families::<super::ApiMetrics>()
                    .count_watch_restart(resource);
                if !said_not_served {
                    tracing::warn!(resource, error = %err, "{}", when_not_served.unwrap_or_default());
                    said_not_served = true;
                }
                if let Some(until_served) = until_served.as_mut() {
                    until_served().await;
                }
            }
            Err(err) => {
                metrics
                    .families::<super::ApiMetrics>()
                    .count_watch_restart(resource);
                tracing::warn!(resource, error = %err, "watch failed; backing off and resuming");
                let since = *failing_since.get_or_insert_with(tokio::time::Instant::now);
                if since.elapsed() >= WATCH_FAILING_UNREADY {
                    health.set(
                        key,
                        Err(format!("failing for {}s: {err}", since.elapsed().as_secs())),
                    );
                }
            }
        }
    }
}

/// A watch of request objects (ContainerRecreateRequests, ContainerResizeRequests): the store
/// of those matching the selector, and `changes`, which ticks on every event.
pub struct WatchedRequests {
    pub store: Store<DynamicObject>,
    pub changes: watch::Receiver<u64>,
}

/// Starts watching the `resource` objects that match `labels`, with the pods' and node's
/// watch behaviour: resume from the last resourceVersion, relist promptly after 410 Gone, and
/// report in `/readyz` a watch that keeps failing. `on_event` sees every event after the store
/// has taken it in.
pub fn watch_requests(
    client: Client,
    resource: &ApiResource,
    labels: &str,
    watched: Watched,
    metrics: Metrics,
    health: Health,
    on_event: impl Fn(&watcher::Event<DynamicObject>) + Send + 'static,
) -> (WatchedRequests, impl Future<Output = ()> + Send + 'static) {
    let writer = reflector::store::Writer::new(resource.clone());
    let store = writer.as_reader();
    let (tick, changes) = watch::channel(0u64);
    let until_served = watched.when_not_served.map(|_| {
        let (client, metrics) = (client.clone(), metrics.clone());
        let crd = format!("{}.{}", resource.plural, resource.group);
        let version = resource.version.clone();
        Box::new(move || {
            until_crd_serves(
                client.clone(),
                crd.clone(),
                version.clone(),
                metrics.clone(),
            )
            .boxed()
        }) as UntilServed
    });
    let api: Api<DynamicObject> = Api::all_with(client, resource);
    let stream = relist_promptly(watcher(api, watcher::Config::default().labels(labels)))
        .reflect(writer)
        .inspect_ok(move |event| on_event(event));
    let task = drive(
        stream,
        watched,
        metrics,
        health,
        Duration::ZERO,
        Arc::new(tick),
        until_served,
    );
    (WatchedRequests { store, changes }, task)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scripted watch: an error, 50 s of quiet (it works again), then errors every 20 s for
    /// 80 s, then quiet again.
    #[tokio::test(start_paused = true)]
    async fn a_watch_failing_for_a_minute_makes_the_agent_unready_until_it_recovers() {
        let health = Health::new(crate::health::Heartbeat::default());
        let (tick, changes) = watch::channel(0u64);
        // (seconds before the item, whether it is an error)
        let script: Vec<(u64, bool)> = vec![
            (1, false),
            (10, true),
            (50, true),
            (20, true),
            (20, true),
            (20, true),
            (120, false),
        ];
        let stream = futures::stream::unfold(script.into_iter(), |mut script| async move {
            let (wait, error) = script.next()?;
            tokio::time::sleep(Duration::from_secs(wait)).await;
            let item = if error {
                Err(watcher::Error::NoResourceVersion)
            } else {
                Ok(watcher::Event::<CachedPod>::InitDone)
            };
            Some((item, script))
        });
        let seen = health.clone();
        let reasons = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = reasons.clone();
        let watch_reasons = tokio::spawn(async move {
            let mut subscribed = seen.subscribe();
            while subscribed.changed().await.is_ok() {
                log.lock().expect("log").push(seen.unready_reasons());
            }
        });
        drive(
            stream,
            PODS,
            Metrics::new(),
            health.clone(),
            Duration::ZERO,
            Arc::new(tick),
            None,
        )
        .await;
        tokio::task::yield_now().await;
        watch_reasons.abort();
        let reasons = reasons.lock().expect("log").clone();
        // The lone error at 11 s is forgotten after 45 s of quiet; the errors from 61 s on make
        // the agent unready at 121 s (failing for 60 s), and 45 s of quiet after the last one
        // ready again, before the event at 241 s.
        let unready: Vec<&Vec<String>> = reasons.iter().filter(|r| !r.is_empty()).collect();
        assert_eq!(unready.len(), 1, "{reasons:?}");
        assert!(
            unready[0][0].starts_with("pods watch: failing for 60s"),
            "{reasons:?}"
        );
        assert!(reasons.last().is_some_and(Vec::is_empty), "{reasons:?}");
        assert!(health.unready_reasons().is_empty());
        assert_eq!(*changes.borrow(), 2, "the events counted");
    }

    /// A 410 starts the backoff over; other errors keep growing it.
    #[test]
    fn an_expired_watch_relists_after_the_first_backoff_step() {
        let expired = Arc::new(AtomicBool::new(false));
        let mut backoff = RelistBackoff {
            inner: watcher::DefaultBackoff::default(),
            expired: expired.clone(),
            progressed: Arc::new(AtomicBool::new(false)),
        };
        let first = backoff.next().expect("a delay");
        let grown = (0..6)
            .filter_map(|_| backoff.next())
            .last()
            .expect("a delay");
        assert!(grown >= Duration::from_secs(10), "{first:?} then {grown:?}");
        expired.store(true, Ordering::Relaxed);
        let after_expiry = backoff.next().expect("a delay");
        assert!(
            after_expiry <= first.max(Duration::from_secs(2)),
            "{after_expiry:?}"
        );
        let next = backoff.next().expect("a delay");
        assert!(next < grown, "it grows again from the start: {next:?}");
    }

    /// A list that keeps failing backs off to the watcher's 30 s, although kube-rs's watcher
    /// yields `Event::Init` (an `Ok`) before each list request: before, every `Init` reset the
    /// backoff and a missing CRD was asked for every 800 ms, forever.
    #[tokio::test(start_paused = true)]
    async fn a_list_that_keeps_failing_backs_off_although_each_attempt_begins_with_init() {
        let attempts = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = attempts.clone();
        // Each attempt as the watcher makes it: Init, then the list's answer (404).
        let inner = futures::stream::unfold(0u32, move |n| {
            let log = log.clone();
            async move {
                let item = if n % 2 == 0 {
                    log.lock().expect("log").push(tokio::time::Instant::now());
                    Ok(watcher::Event::<DynamicObject>::Init)
                } else {
                    let status = ::kube::core::Status {
                        code: 404,
                        ..Default::default()
                    };
                    Err(watcher::Error::InitialListFailed(::kube::Error::Api(
                        Box::new(status),
                    )))
                };
                Some((item, n + 1))
            }
        });
        let stream = relist_promptly(inner);
        let mut stream = std::pin::pin!(stream);
        for _ in 0..20 {
            stream.next().await;
        }
        let attempts = attempts.lock().expect("log").clone();
        let gaps: Vec<Duration> = attempts.windows(2).map(|w| w[1] - w[0]).collect();
        let last = *gaps.last().expect("gaps");
        assert!(last >= Duration::from_secs(10), "{gaps:?}");
        let total = attempts[attempts.len() - 1] - attempts[0];
        assert!(total >= Duration::from_secs(60), "{total:?}: {gaps:?}");
    }

    /// A 404 of an optional resource: the warning once, then the stream is not polled again
    /// until `until_served` returns; the first answer after it counts as an event, `Init` not.
    #[tokio::test(start_paused = true)]
    async fn an_unserved_resource_is_not_asked_for_again_until_it_is_served() {
        let health = Health::new(crate::health::Heartbeat::default());
        let (tick, changes) = watch::channel(0u64);
        let polled = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = polled.clone();
        let script = vec!["init", "404", "init", "done"];
        let stream = futures::stream::unfold(script.into_iter(), move |mut script| {
            let log = log.clone();
            async move {
                let step = script.next()?;
                log.lock()
                    .expect("log")
                    .push((step, tokio::time::Instant::now()));
                let item = match step {
                    "init" => Ok(watcher::Event::<DynamicObject>::Init),
                    "done" => Ok(watcher::Event::InitDone),
                    _ => {
                        let status = ::kube::core::Status {
                            code: 404,
                            ..Default::default()
                        };
                        Err(watcher::Error::InitialListFailed(::kube::Error::Api(
                            Box::new(status),
                        )))
                    }
                };
                Some((item, script))
            }
        });
        let waits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = waits.clone();
        let until_served: UntilServed = Box::new(move || {
            counted.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_secs(3600)).boxed()
        });
        let start = tokio::time::Instant::now();
        drive(
            stream,
            Watched {
                resource: "containerresizerequests",
                health_key: "ContainerResizeRequests watch",
                when_not_served: Some("not installed"),
            },
            Metrics::new(),
            health.clone(),
            Duration::ZERO,
            Arc::new(tick),
            Some(until_served),
        )
        .await;
        assert_eq!(waits.load(Ordering::Relaxed), 1);
        let polled = polled.lock().expect("log").clone();
        let (step, at) = polled[2];
        assert_eq!(step, "init");
        assert!(at - start >= Duration::from_secs(3600), "{polled:?}");
        assert_eq!(*changes.borrow(), 1, "InitDone ticks, Init does not");
        assert!(health.unready_reasons().is_empty());
    }

    /// A watch of a resource the API server does not serve (a CRD not installed) keeps trying
    /// without making the agent unready, where that resource is optional; a watch of a resource
    /// that must be served fails the agent's readiness after a minute, as before.
    #[tokio::test(start_paused = true)]
    async fn an_optional_resource_not_served_leaves_the_agent_ready() {
        async fn unready_after_two_minutes_of_404(watched: Watched) -> Vec<String> {
            let health = Health::new(crate::health::Heartbeat::default());
            let (tick, _changes) = watch::channel(0u64);
            let stream = futures::stream::unfold(0u32, |n| async move {
                (n < 12).then_some(())?;
                tokio::time::sleep(Duration::from_secs(10)).await;
                let status = ::kube::core::Status {
                    code: 404,
                    message: "the server could not find the requested resource".into(),
                    ..Default::default()
                };
                let err = watcher::Error::InitialListFailed(::kube::Error::Api(Box::new(status)));
                Some((Err::<watcher::Event<DynamicObject>, _>(err), n + 1))
            });
            drive(
                stream,
                watched,
                Metrics::new(),
                health.clone(),
                Duration::ZERO,
                Arc::new(tick),
                None,
            )
            .await;
            health.unready_reasons()
        }
        let optional = Watched {
            resource: "containerresizerequests",
            health_key: "ContainerResizeRequests watch",
            when_not_served: Some("not installed"),
        };
        assert_eq!(
            unready_after_two_minutes_of_404(optional).await,
            Vec::<String>::new()
        );
        let required = Watched {
            when_not_served: None,
            ..optional
        };
        let reasons = unready_after_two_minutes_of_404(required).await;
        assert_eq!(reasons.len(), 1, "{reasons:?}");
        assert!(
            reasons[0].starts_with("ContainerResizeRequests watch: failing for"),
            "{reasons:?}"
        );
    }
}
