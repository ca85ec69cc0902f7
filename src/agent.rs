//! The agent's main loop: serve health and metrics, tell systemd we are up, then keep the node
//! view current from the API's pods and the runtime's containers. Dependencies that are down
//! (containerd, the API server) are states reported in `/readyz` and `STATUS=`, never a reason
//! to exit: the agent retries with backoff.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::net::TcpListener;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

use crate::admin::{self, AdminRequest};
use crate::checkpoints;
use crate::config::Config;
use crate::cri::{CriClient, CriConfig, CriEndpoint, CriError};
use crate::hashing::KubeletVersion;
use crate::health::Health;
use crate::health::Heartbeat;
use crate::http;
use crate::kube::{self, NodeObject, NodePods};
use crate::metrics::Metrics;
use crate::nodeview::{self, HashCache, NodeView, RuntimeSnapshot, RuntimeTracker};
use crate::recreate::{self, RecreateConfig};
use crate::requests;
use crate::resize::{self, ResizeConfig};
use crate::restart::{KillLedger, RestartTracker, StopGate};
use crate::restartrequest::{self, RestartRequestConfig};
use crate::rollout::{self, RolloutConfig};
use crate::systemd::{self, Notifier};
use crate::upgrade;

/// How often the main loop turns even when nothing happens (its heartbeat).
const TICK: Duration = Duration::from_secs(1);

/// How often, at most, the kubelet's process start time is read.
const KUBELET_PROCESS_READ: Duration = Duration::from_secs(10);
/// How far the runtime listing slows down while nothing changes: refresh-interval times this.
const IDLE_BACKOFF: u32 = 8;
/// Ticks without any change after which the view is rebuilt anyway (the restart tracker's
/// ten-minute timeout needs no finer grain).
const REBUILD_IDLE_TICKS: u32 = 60;

/// Every module's metric families, registered at start: each outcome series exists at 0
/// before its first event (an increase that rate() and alerts see), and `/metrics` lists every
/// family the shipped dashboard and alerts name even before it has a sample.
pub(crate) fn register_metrics(metrics: &Metrics) {
    drop(metrics.families::<crate::cri::CriCallMetrics>());
    drop(metrics.families::<crate::kube::ApiMetrics>());
    drop(metrics.families::<crate::nodeview::RefreshMetrics>());
    drop(metrics.families::<crate::restart::RestartMetrics>());
    drop(metrics.families::<crate::recreate::ReactionMetrics>());
    drop(metrics.families::<crate::containermeta::ContainerMetaMetrics>());
    drop(metrics.families::<crate::resize::ResizeMetrics>());
    drop(metrics.families::<crate::upgrade::UpgradeMetrics>());
}

/// Runs until SIGTERM or SIGINT. Errors only for what the agent itself cannot do (bind its
/// listen address or admin socket): those are configuration problems.
pub async fn run(config: Config) -> anyhow::Result<()> {
    let metrics = Metrics::new();
    register_metrics(&metrics);
    let notifier = Notifier::start();
    let heartbeat = Heartbeat::default();
    let health = Health::new(heartbeat.clone()).with_stuck_worker_after(config.stuck_worker_after);
    health.set("pods", Err("pod cache not synced yet".into()));
    health.set("node", Err("node object not synced yet".into()));
    health.set("runtime", Err("container runtime not listed yet".into()));
    let (views_tx, views) = watch::channel(Arc::new(NodeView {
        node_name: config.node_name.clone(),
        ..Default::default()
    }));
    let mut tasks = tokio::task::JoinSet::new();
    serve(&config, &mut tasks, &metrics, &health, &views).await?;
    // Ready means "the agent is up", not "its dependencies are": see the module docs.
    heartbeat.beat();
    notifier.ready();
    if let Some(interval) = systemd::watchdog_interval() {
        tasks.spawn(systemd::run_watchdog(
            notifier.clone(),
            heartbeat.clone(),
            health.clone(),
            interval,
        ));
    }

    let (snapshots_tx, snapshots) = watch::channel(Arc::new(RuntimeSnapshot::default()));
    let (cri_tx, cri) = watch::channel(None::<CriClient>);
    // Pod changes (kubelet reporting a container's start or exit, a new pod) hurry the next
    // runtime listing.
    let activity = Arc::new(tokio::sync::Notify::new());
    tasks.spawn(refresh_runtime(
        config.clone(),
        metrics.clone(),
        health.clone(),
        snapshots_tx,
        cri_tx,
        activity.clone(),
    ));
    let (api_tx, api) = watch::channel(None::<ApiSources>);
    tasks.spawn(connect_api(
        config.clone(),
        metrics.clone(),
        health.clone(),
        api_tx,
    ));
    let upgrade_watch = watch_upgrades(&config, &metrics, &api, &mut tasks);

    // The workers that change containers; on shutdown they finish what they started.
    let (shutdown_tx, shutdown) = watch::channel(false);
    let ledger = KillLedger::default();
    let restarts = RestartTracker::new(
        metrics.clone(),
        ledger.clone(),
        crate::restart::backoff::BackoffSettings::from_kubelet_config(&config.kubelet_config),
    );
    let mut workers = tokio::spawn(run_workers(
        (config.clone(), ledger),
        api.clone(),
        cri,
        views.clone(),
        health.clone(),
        metrics.clone(),
        shutdown,
    ));

    let mut view_loop = ViewLoop {
        kubelet_process: crate::restart::KubeletProcess::new("/proc", &config.kubelet_process_name),
        config: config.clone(),
        health_changes: health.subscribe(),
        health,
        heartbeat,
        notifier: notifier.clone(),
        views_tx,
        snapshots,
        api,
        api_changes: None,
        activity,
        restarts,
        upgrade_watch,
        hash_cache: HashCache::default(),
        kubelet_read: None,
        last_status: String::new(),
        idle_ticks: 0,
    };
    let failure = view_loop.run(&mut workers).await?;

    notifier.stopping();
    let _ = shutdown_tx.send(true);
    if failure.is_none() {
        tracing::info!("stopping: finishing work under way, starting nothing new");
        // A kill under way ends within its grace period; systemd's stop timeout bounds the wait.
        let _ = workers.await;
    }
    tasks.abort_all();
    let _ = std::fs::remove_file(&config.admin_socket);
    notifier.flush(Duration::from_secs(2)).await;
    match failure {
        Some(reason) => Err(anyhow::anyhow!(reason)),
        None => Ok(()),
    }
}

/// Binds the listen address and the admin socket, and serves `/metrics`, `/healthz`,
/// `/readyz` and the admin requests from then on.
async fn serve(
    config: &Config,
    tasks: &mut tokio::task::JoinSet<()>,
    metrics: &Metrics,
    health: &Health,
    views: &watch::Receiver<Arc<NodeView>>,
) -> anyhow::Result<()> {
    let listener = TcpListener::bind(config.listen_address)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", config.listen_address))?;
    let admin_listener = admin::bind(&config.admin_socket)?;
    tasks.spawn(http::serve(listener, metrics.clone(), health.clone()));
    tasks.spawn(admin::serve(
        admin_listener,
        admin_handler(views.clone(), config.kubelet_root_dir.clone()),
    ));
    tracing::info!(listen = %config.listen_address, admin = %config.admin_socket.display(), node = %config.node_name, "inplaced serving");
    Ok(())
}

/// What a kubelet upgrade would do here: the metrics (from every view), and the node's
/// NodeUpgradeCheck, published once the API client exists.
fn watch_upgrades(
    config: &Config,
    metrics: &Metrics,
    api: &watch::Receiver<Option<ApiSources>>,
    tasks: &mut tokio::task::JoinSet<()>,
) -> upgrade::UpgradeWatch {
    let (upgrade_watch, upgrade_answers) = upgrade::UpgradeWatch::new(
        config.upgrade_targets.clone(),
        config.kubelet_root_dir.clone(),
        metrics.clone(),
    );
    let mut api = api.clone();
    let node = config.node_name.clone();
    tasks.spawn(async move {
        let client = match api.wait_for(Option::is_some).await {
            Ok(sources) => sources.as_ref().map(|s| s.client.clone()),
            Err(_) => None,
        };
        if let Some(client) = client {
            upgrade::run_publisher(client, node, upgrade_answers).await;
        }
    });
    upgrade_watch
}

/// The main loop: rebuilds the node view when one of its inputs changed (and now and then
/// regardless, for the restart tracker's timeouts) and publishes it; a plain tick only proves
/// the loop is alive.
struct ViewLoop {
    config: Config,
    health: Health,
    health_changes: watch::Receiver<u64>,
    heartbeat: Heartbeat,
    notifier: Notifier,
    views_tx: watch::Sender<Arc<NodeView>>,
    snapshots: watch::Receiver<Arc<RuntimeSnapshot>>,
    api: watch::Receiver<Option<ApiSources>>,
    /// The pods' and the node's change ticks, once the API sources exist.
    api_changes: Option<(watch::Receiver<u64>, watch::Receiver<u64>)>,
    activity: Arc<tokio::sync::Notify>,
    restarts: RestartTracker,
    upgrade_watch: upgrade::UpgradeWatch,
    hash_cache: HashCache,
    /// Its restarts make the back-off predictions uncertain; /proc is read at most every 10 s.
    kubelet_process: crate::restart::KubeletProcess,
    kubelet_read: Option<std::time::Instant>,
    last_status: String,
    idle_ticks: u32,
}

/// Why the main loop woke.
enum Wake {
    /// Something the view is made of changed (or it is due anyway).
    Rebuild,
    /// Only the heartbeat's tick.
    Tick,
    /// A signal, or an input gone: stop.
    Stop,
    /// The request handlers ended: the agent must not go on without them.
    Fail(String),
}

impl ViewLoop {
    /// Runs until a signal or a failure of the request handlers (`workers`); returns the
    /// failure, if any.
    async fn run(
        &mut self,
        workers: &mut tokio::task::JoinHandle<()>,
    ) -> anyhow::Result<Option<String>> {
        let mut sigterm = signal(SignalKind::terminate())?;
        let mut sigint = signal(SignalKind::interrupt())?;
        let mut ticker = tokio::time::interval(TICK);
        loop {
            let wake = tokio::select! {
                wake = self.next_change(workers, &mut ticker) => wake,
                _ = sigterm.recv() => Wake::Stop,
                _ = sigint.recv() => Wake::Stop,
            };
            let rebuild = match wake {
                Wake::Stop => return Ok(None),
                Wake::Fail(reason) => {
                    tracing::error!(%reason, "exiting");
                    return Ok(Some(reason));
                }
                Wake::Rebuild => true,
                Wake::Tick => {
                    self.idle_ticks += 1;
                    self.idle_ticks >= REBUILD_IDLE_TICKS
                }
            };
            self.heartbeat.beat();
            let kubelet_restarted = self.kubelet_restarted();
            if rebuild || kubelet_restarted {
                self.idle_ticks = 0;
                self.rebuild();
            }
        }
    }

    /// Waits for the next reason to look again.
    async fn next_change(
        &mut self,
        workers: &mut tokio::task::JoinHandle<()>,
        ticker: &mut tokio::time::Interval,
    ) -> Wake {
        // A back-off prediction that changes by the clock alone (a running container's entry
        // forgotten after ten minutes) is shown from that moment, not up to a minute later.
        let prediction_changes = self.restarts.prediction_changes_at().map(|at| {
            let until = at.duration_since(k8s_openapi::jiff::Timestamp::now());
            Duration::try_from(until).unwrap_or(Duration::ZERO) + Duration::from_millis(100)
        });
        tokio::select! {
            _ = self.health_changes.changed() => Wake::Rebuild,
            () = async {
                match prediction_changes {
                    Some(after) => tokio::time::sleep(after).await,
                    None => std::future::pending().await,
                }
            } => Wake::Rebuild,
            // The request handlers end only on shutdown: anything else is a bug (a panic).
            // Exit, so that systemd restarts the agent, rather than serve without them.
            ended = workers => Wake::Fail(match ended {
                Err(err) if err.is_panic() => "a request handler panicked".to_string(),
                Err(err) => format!("the request handlers failed: {err}"),
                Ok(()) => "the request handlers stopped".to_string(),
            }),
            _ = ticker.tick() => Wake::Tick,
            changed = self.snapshots.changed() => if changed.is_err() { Wake::Stop } else { Wake::Rebuild },
            changed = self.api.changed() => if changed.is_err() { Wake::Stop } else { Wake::Rebuild },
            Some(()) = async {
                match self.api_changes.as_mut() {
                    Some((pods, node)) => tokio::select! {
                        changed = pods.changed() => changed.ok(),
                        changed = node.changed() => changed.ok(),
                    },
                    None => std::future::pending().await,
                }
            } => {
                self.activity.notify_one();
                Wake::Rebuild
            }
        }
    }

    /// The kubelet's start is read on any wake at most every 10 s, so that a kubelet restart
    /// is shown when it is seen, not at the next rebuild (up to a minute later when idle).
    fn kubelet_restarted(&mut self) -> bool {
        let due = self
            .kubelet_read
            .is_none_or(|at| at.elapsed() >= KUBELET_PROCESS_READ);
        if !due {
            return false;
        }
        self.kubelet_read = Some(std::time::Instant::now());
        self.restarts
            .kubelet_started(self.kubelet_process.started_at())
    }

    /// Joins the newest inputs into a view, annotates and times it, and publishes it.
    fn rebuild(&mut self) {
        let sources = self.api.borrow().clone();
        if self.api_changes.is_none() {
            self.api_changes = sources
                .as_ref()
                .map(|sources| (sources.pods.changes.clone(), sources.node.changes.clone()));
        }
        let snapshot = self.snapshots.borrow().clone();
        let mut joined = build_view(
            &self.config.node_name,
            sources.as_ref(),
            &snapshot,
            &self.health,
        );
        nodeview::annotate(&mut joined, &mut self.hash_cache);
        self.restarts.observe(&mut joined, &snapshot);
        self.upgrade_watch.observe(&joined);
        let status = status_line(&joined, &self.health);
        self.views_tx.send_replace(Arc::new(joined));
        if status != self.last_status {
            self.notifier.status(&status);
            tracing::info!(status = %status, "state changed");
            self.last_status = status;
        }
    }
}

/// What the API side provides once the client is built.
#[derive(Clone)]
struct ApiSources {
    client: ::kube::Client,
    pods: NodePods,
    node: NodeObject,
}

/// Starts the request handlers once both the API client and the runtime client exist.
async fn run_workers(
    (config, ledger): (Config, KillLedger),
    mut api: watch::Receiver<Option<ApiSources>>,
    mut cri: watch::Receiver<Option<CriClient>>,
    views: watch::Receiver<Arc<NodeView>>,
    health: Health,
    metrics: Metrics,
    mut shutdown: watch::Receiver<bool>,
) {
    let ready = async {
        let api = api.wait_for(Option::is_some).await.ok()?.clone()?;
        let cri = cri.wait_for(Option::is_some).await.ok()?.clone()?;
        Some((api, cri))
    };
    let (api, cri) = tokio::select! {
        ready = ready => match ready {
            Some(ready) => ready,
            None => return,
        },
        _ = shutdown.wait_for(|stop| *stop) => return,
    };
    // CRRs, restart requests and env changes may want the same container at the same moment:
    // one stop.
    let stops = StopGate::new();
    let mut meta_config = crate::containermeta::ContainerMetaConfig::new(
        &config.node_name,
        config.state_dir.clone(),
        stops.clone(),
        ledger.clone(),
    );
    meta_config.settle = config.env_restart_settle;
    meta_config.restarts_per_minute = config.env_restarts_per_minute;
    let ctx = requests::Context {
        client: api.client,
        cri,
        views,
        health,
        metrics,
        shutdown,
    };
    let meta = crate::containermeta::run(ctx.clone(), meta_config);
    let resize = resize::run(
        ctx.clone(),
        ResizeConfig {
            node_name: config.node_name.clone(),
            actuator: config.resize_actuator,
            kubelet_config: config.kubelet_config.clone(),
            cgroup_root: config.cgroup_root.clone(),
        },
    );
    let rollouts = rollout::run(
        ctx.clone(),
        RolloutConfig {
            node_name: config.node_name.clone(),
        },
    );
    let restart_requests = restartrequest::run(
        ctx.clone(),
        RestartRequestConfig {
            node_name: config.node_name.clone(),
            state_dir: config.state_dir.clone(),
            ledger: ledger.clone(),
            stops: stops.clone(),
        },
    );
    let recreate = recreate::run(
        ctx,
        RecreateConfig {
            node_name: config.node_name.clone(),
            state_dir: config.state_dir.clone(),
            ignore_kruise_daemon: config.ignore_kruise_daemon,
            ledger,
            stops,
        },
    );
    tokio::join!(recreate, meta, resize, restart_requests, rollouts);
}

fn build_view(
    node_name: &str,
    sources: Option<&ApiSources>,
    snapshot: &RuntimeSnapshot,
    health: &Health,
) -> NodeView {
    let mut synced = false;
    let (pods, kubelet_version, allocatable) = match sources {
        Some(ApiSources { pods, node, .. }) => {
            let is_synced = |ready: Option<Result<(), _>>| matches!(ready, Some(Ok(())));
            let pods_ready = is_synced(pods.store.wait_until_ready().now_or_never());
            let node_ready = is_synced(node.store.wait_until_ready().now_or_never());
            health.set(
                "pods",
                if pods_ready {
                    Ok(())
                } else {
                    Err("pod cache not synced yet".into())
                },
            );
            synced = pods_ready && node_ready;
            health.set(
                "node",
                if node_ready {
                    Ok(())
                } else {
                    Err("node object not synced yet".into())
                },
            );
            (
                pods.store.state(),
                node.kubelet_version(),
                node.allocatable(),
            )
        }
        None => (Vec::new(), None, None),
    };
    let mut view = nodeview::join(node_name, &pods, snapshot);
    view.kubelet_version = kubelet_version;
    view.node_allocatable = allocatable;
    view.synced = synced && snapshot.runtime.is_some();
    view
}

fn status_line(view: &NodeView, health: &Health) -> String {
    let reasons = health.unready_reasons();
    if reasons.is_empty() {
        format!(
            "ready: {} pods, runtime {}",
            view.pods.len(),
            view.runtime.as_deref().unwrap_or("unknown")
        )
    } else {
        format!("waiting: {}", reasons.join("; "))
    }
}

fn admin_handler(
    views: watch::Receiver<Arc<NodeView>>,
    kubelet_root_dir: std::path::PathBuf,
) -> admin::Handler {
    Arc::new(move |request| {
        let view = views.borrow().clone();
        match request {
            AdminRequest::Pods => serde_json::to_value(view.as_ref()).map_err(|e| e.to_string()),
            AdminRequest::UpgradeCheck { to } => {
                let to = KubeletVersion::parse(&to).map_err(|e| e.to_string())?;
                let mut report = nodeview::upgrade_check(&view, &to);
                report.checkpoints = checkpoints::check(&kubelet_root_dir, &to);
                serde_json::to_value(report).map_err(|e| e.to_string())
            }
        }
    })
}

/// Lists the runtime on every container event where the runtime streams them, and every
/// `refresh_interval` regardless (containerd 1.6 has no event stream; events can be lost),
/// resolving and re-resolving the endpoint while none is found.
async fn refresh_runtime(
    config: Config,
    metrics: Metrics,
    health: Health,
    snapshots: watch::Sender<Arc<RuntimeSnapshot>>,
    clients: watch::Sender<Option<CriClient>>,
    activity: Arc<tokio::sync::Notify>,
) {
    let base = config.refresh_interval;
    let mut interval = base;
    let mut tracker: Option<RuntimeTracker> = None;
    let mut events = EventStream::Closed;
    let mut last_error = String::new();
    // Discovered sockets that answered but not as CRI v1: the next discovery passes over them.
    let mut not_cri: Vec<CriEndpoint> = Vec::new();
    loop {
        if tracker.is_none() {
            match CriEndpoint::resolve_passing_over(config.cri_endpoint.as_deref(), &not_cri) {
                Ok(endpoint) => {
                    events = EventStream::Closed;
                    let client = CriClient::new(CriConfig::new(endpoint))
                        .with_observer(Arc::new(metrics.families::<crate::cri::CriCallMetrics>()));
                    clients.send_replace(Some(client.clone()));
                    tracker = Some(RuntimeTracker::new(client));
                }
                Err(err) => report(&health, &mut last_error, err.to_string()),
            }
        }
        let mut move_to = None;
        if let Some(tracker) = tracker.as_mut() {
            if matches!(events, EventStream::Closed) {
                // Opened beside the listing, not before it: the open may wait for an event.
                let client = tracker.client().clone();
                events =
                    EventStream::Opening(Box::pin(async move { client.container_events().await }));
            }
            let result = tracker.refresh().await;
            metrics
                .families::<crate::nodeview::RefreshMetrics>()
                .count(result.is_ok());
            match result {
                Ok(snapshot) => {
                    health.set("runtime", Ok(()));
                    last_error.clear();
                    // Nothing downstream has anything to do for the same listing again.
                    let changed = snapshots.send_if_modified(|current| {
                        let changed = !current.same_as(&snapshot);
                        if changed {
                            *current = Arc::new(snapshot);
                        }
                        changed
                    });
                    // A quiet runtime is listed less and less often, down to one listing per
                    // IDLE_BACKOFF intervals; any change brings back the configured interval.
                    interval = if changed {
                        base
                    } else {
                        (interval * 2).min(base * IDLE_BACKOFF)
                    };
                }
                Err(err) => {
                    // The event stream is left as it is: a stream that still works keeps
                    // working, and one the runtime ended ends by itself. (Reopening a live one
                    // would also leave containerd 1.7's abandoned handler to swallow the next
                    // event from the channel all its streams share.)
                    if matches!(err, CriError::NotCriV1 { .. }) && config.cri_endpoint.is_none() {
                        let endpoint = tracker.client().endpoint().clone();
                        if !not_cri.contains(&endpoint) {
                            not_cri.push(endpoint.clone());
                        }
                        // Another socket may be the node's CRI runtime: move to it.
                        move_to = CriEndpoint::resolve_passing_over(None, &not_cri)
                            .ok()
                            .filter(|next| *next != endpoint);
                    }
                    report(&health, &mut last_error, err.to_string());
                }
            }
        }
        let listed = tokio::time::Instant::now();
        let mut deadline = listed + interval;
        if let Some(next) = move_to {
            tracing::info!(endpoint = %next, "trying the next runtime socket");
            tracker = None;
            // Right away, not after the interval.
            deadline = listed;
        }
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => break,
                _ = activity.notified() => {
                    interval = base;
                    deadline = deadline.min(listed + base);
                }
                list_now = events.next(config.refresh_interval) => {
                    if list_now {
                        break;
                    }
                }
            }
        }
    }
}

type Events = tonic::Streaming<crate::cri::proto::ContainerEventResponse>;

/// The runtime's container event stream, as far as it goes: any event means "list now".
enum EventStream {
    Closed,
    Opening(std::pin::Pin<Box<dyn Future<Output = Result<Events, crate::cri::CriError>> + Send>>),
    Open(Box<Events>),
    /// The runtime has none (containerd 1.6): listing on the interval only, until the agent
    /// moves to another runtime socket.
    Unsupported,
}

impl EventStream {
    /// Waits for the stream to open or for its next event (never returns while closed or
    /// unsupported); true when the runtime should be listed now.
    async fn next(&mut self, interval: Duration) -> bool {
        match self {
            EventStream::Opening(open) => {
                let opened = open.await;
                match opened {
                    // containerd 1.7+ opens with its first event.
                    Ok(stream) => {
                        *self = EventStream::Open(Box::new(stream));
                        true
                    }
                    // The runtime has none (containerd 1.6). Other answers are retried on the
                    // next turn.
                    Err(err) if err.is_unimplemented() => {
                        tracing::info!(?interval, error = %err, "the runtime has no container event stream; polling");
                        *self = EventStream::Unsupported;
                        false
                    }
                    Err(err) => {
                        tracing::debug!(error = %err, "container event stream not open");
                        *self = EventStream::Closed;
                        false
                    }
                }
            }
            EventStream::Open(stream) => {
                if !matches!(stream.message().await, Ok(Some(_))) {
                    *self = EventStream::Closed;
                }
                true
            }
            EventStream::Closed | EventStream::Unsupported => std::future::pending().await,
        }
    }
}

fn report(health: &Health, last_error: &mut String, error: String) {
    if *last_error != error {
        tracing::warn!(error = %error, "container runtime not available");
        *last_error = error.clone();
    }
    health.set("runtime", Err(error));
}

/// Builds the API client (retrying: a kubeconfig may appear later, the API server may be down)
/// and starts the node's pod and node watches.
async fn connect_api(
    config: Config,
    metrics: Metrics,
    health: Health,
    sources: watch::Sender<Option<ApiSources>>,
) {
    let mut delay = Duration::from_secs(1);
    let client = loop {
        match kube::client(
            config.kubeconfig.as_deref(),
            metrics.clone(),
            health.clone(),
            config.api_limits(),
        )
        .await
        {
            Ok(client) => break client,
            Err(err) => {
                tracing::warn!(error = %err, "cannot build the Kubernetes client; retrying");
                health.set("api", Err(err.to_string()));
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(60));
            }
        }
    };
    health.set("api", Ok(()));
    let (pods, pods_task) = kube::watch_node_pods(
        client.clone(),
        &config.node_name,
        metrics.clone(),
        health.clone(),
        config.startup_jitter,
    );
    let (node, node_task) = kube::watch_node(client.clone(), &config.node_name, metrics, health);
    sources.send_replace(Some(ApiSources { client, pods, node }));
    tokio::join!(pods_task, node_task);
}

#[cfg(test)]
mod metrics_tests {
    use std::time::Duration;

    use super::*;
    use crate::containermeta::EnvRestartResult;
    use crate::cri::CallObserver;
    use crate::nodeview::Trigger;
    use crate::restart::{RestartPhase, RestartResult};

    #[test]
    fn outcome_counters_start_at_zero() {
        let metrics = Metrics::new();
        register_metrics(&metrics);
        let text = metrics.encode();
        for series in [
            "inplaced_env_restarts_total{result=\"error\"} 0",
            "inplaced_restarts_total{trigger=\"crr\",result=\"not-ready\"} 0",
            "inplaced_resizes_total{actuator=\"cri\",result=\"Failed\"} 0",
            "inplaced_node_view_refreshes_total{result=\"error\"} 0",
            "inplaced_runtime_meta_patches_total{result=\"error\"} 0",
        ] {
            assert!(text.contains(series), "{series} missing from:\n{text}");
        }
    }

    /// Every metric a query of the shipped Grafana dashboard names must be one the agent exports.
    #[test]
    fn every_dashboard_query_names_an_exported_metric() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/packaging/grafana/inplaced-dashboard.json"
        );
        let dashboard: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let metrics = Metrics::new();
        register_metrics(&metrics);
        // Families are exposed once they have a sample: give every one of them one.
        metrics.families::<crate::cri::CriCallMetrics>().observe(
            "Version",
            tonic::Code::Ok,
            Duration::from_millis(1),
        );
        let api = metrics.families::<crate::kube::ApiMetrics>();
        api.observe_request("list", "pods", 200, Duration::from_millis(1));
        api.count_watch_restart("pods");
        metrics
            .families::<crate::nodeview::RefreshMetrics>()
            .count(true);
        let restarts = metrics.families::<crate::restart::RestartMetrics>();
        restarts.observe_phase(Trigger::Crr, RestartPhase::Total, 1.0);
        restarts.count(Trigger::Crr, RestartResult::Ready);
        let meta = metrics.families::<crate::containermeta::ContainerMetaMetrics>();
        meta.count_env_restart(EnvRestartResult::Success);
        meta.count_annotation_patch(true);
        let resizes = metrics.families::<crate::resize::ResizeMetrics>();
        resizes.observe("cri", "Succeeded", Some(0.1));
        resizes.count_reapplied();
        metrics
            .families::<crate::recreate::ReactionMetrics>()
            .observe(Duration::from_millis(2));
        metrics
            .families::<crate::upgrade::UpgradeMetrics>()
            .set_summaries(&[crate::upgrade::TargetSummary {
                release: "1.34".into(),
                restart: 1,
                keep: 2,
                unknown: 0,
                not_running: 0,
                checkpoint_hazard: false,
                checkpoint_message: None,
                workloads: vec![],
                workloads_omitted: 0,
            }]);
        let exported: Vec<String> = metrics
            .encode()
            .lines()
            .filter_map(|line| line.strip_prefix("# TYPE "))
            .filter_map(|rest| rest.split_whitespace().next())
            .map(str::to_owned)
            .collect();
        assert!(exported.len() >= 8, "{exported:?}");
        let mut queries = Vec::new();
        for panel in dashboard["panels"].as_array().unwrap() {
            for target in panel["targets"].as_array().unwrap() {
                queries.push(target["expr"].as_str().unwrap().to_owned());
            }
        }
        for variable in dashboard["templating"]["list"].as_array().unwrap() {
            if let Some(query) = variable["query"]
                .as_str()
                .filter(|q| q.contains("inplaced_"))
            {
                queries.push(query.to_owned());
            }
        }
        assert!(!queries.is_empty());
        for query in &queries {
            let mut named = 0;
            for (start, _) in query.match_indices("inplaced_") {
                let name: String = query[start..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                // Samples of a family: name_bucket/_sum/_count of a histogram, name_total of a
                // counter, name_info of an info metric.
                let family = ["_bucket", "_sum", "_count", "_total", "_info"]
                    .iter()
                    .find_map(|suffix| name.strip_suffix(suffix))
                    .unwrap_or(&name);
                assert!(
                    exported.iter().any(|e| e == family),
                    "{name} in {query:?} is not exported: {exported:?}"
                );
                named += 1;
            }
            assert!(named > 0, "a query without an inplaced metric: {query}");
        }
    }
}
