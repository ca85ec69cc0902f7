//! The loop every request kind runs (ContainerRecreateRequests, ContainerRestartRequests,
//! ContainerResizeRequests, ContainerRestartRollouts): level-triggered passes over the watched
//! requests and the node view, on any change of either, on background work ending, on whatever
//! else the kind waits for (a status write landing), and at least every second; housekeeping
//! every ten minutes; and on shutdown, no new work and a wait for the work under way (a kill or a
//! resize is never left half done).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ::kube::api::{ApiResource, DynamicObject};
use ::kube::runtime::watcher;
use tokio::sync::{mpsc, watch};

use super::Context;
use crate::health::{WorkerBeat, hang_here_if_told};
use crate::kube::{Watched, WatchedRequests};
use crate::nodeview::NodeView;

/// The longest wait between two passes: requests are also looked at without a change.
pub(crate) const MAX_REQUEUE: Duration = Duration::from_secs(1);
const HOUSEKEEPING_PERIOD: Duration = Duration::from_secs(600);
/// Background work reports that may wait to be taken in.
const REPORTS: usize = 64;

/// One request kind's controller, as [`run_request_loop`] drives it.
pub(crate) trait RequestController: Send {
    /// What a piece of background work (a kill, a resize) reports when it ends;
    /// `std::convert::Infallible` for a kind whose work ends within its pass.
    type Done: Send + 'static;

    /// The loop's name in `/healthz` when it is stuck.
    const WORKER: &'static str;

    /// One pass over every request; returns when to look again at the latest (a second at
    /// most).
    fn sync(
        &mut self,
        requests: &[Arc<DynamicObject>],
        view: &NodeView,
    ) -> impl Future<Output = Option<Duration>> + Send;

    /// Takes in the end of a piece of background work.
    fn finish(&mut self, done: Self::Done);

    /// Ends when something else than the requests and the view calls for a pass: a status
    /// write landing, or a change the kind follows itself. Never, unless the kind says so.
    fn woken(&mut self) -> impl Future<Output = ()> + Send {
        std::future::pending()
    }

    /// Background work is under way: shutdown waits for it. None, unless the kind has some.
    fn busy(&self) -> bool {
        false
    }

    /// Forgets what belongs to requests no longer watched (every ten minutes).
    fn housekeep(&mut self, requests: &[Arc<DynamicObject>]) -> impl Future<Output = ()> + Send {
        let _ = requests;
        async {}
    }
}

/// Which objects a kind handles: this node's, by label.
pub(crate) struct RequestWatch<F> {
    pub resource: ApiResource,
    pub selector: String,
    pub watched: Watched,
    /// Sees every watch event once the store has it (e.g. to time the reaction to it).
    pub on_event: F,
}

/// Runs a request kind until `ctx.shutdown` turns true: watches its requests, builds its
/// controller with the sender its background work reports to, and runs the loop.
pub(crate) async fn run_kind<C, F>(
    ctx: Context,
    requests: RequestWatch<F>,
    controller: impl FnOnce(mpsc::Sender<C::Done>) -> C,
) where
    C: RequestController,
    F: Fn(&watcher::Event<DynamicObject>) + Send + 'static,
{
    let progress = ctx.health.worker(C::WORKER, MAX_REQUEUE);
    let (watched, watch_task) = crate::kube::watch_requests(
        ctx.client.clone(),
        &requests.resource,
        &requests.selector,
        requests.watched,
        ctx.metrics.clone(),
        ctx.health.clone(),
        requests.on_event,
    );
    let (reports_tx, reports) = mpsc::channel(REPORTS);
    let controller = controller(reports_tx.clone());
    let watch_task = tokio::spawn(watch_task);
    run_request_loop(
        controller,
        (reports_tx, reports),
        watched,
        watch_task,
        ctx.views,
        ctx.shutdown,
        progress,
    )
    .await;
}

/// Runs `controller` until `shutdown` turns true; then stops the watch (`watch_task`), starts no
/// new work and returns once the work under way has reported to `reports`. The loop keeps a
/// sender of `reports` itself, so that the channel stays open whatever the controller does with
/// its own.
pub(crate) async fn run_request_loop<C: RequestController>(
    mut controller: C,
    (_keep_open, mut reports): (mpsc::Sender<C::Done>, mpsc::Receiver<C::Done>),
    requests: WatchedRequests,
    watch_task: tokio::task::JoinHandle<()>,
    mut views: watch::Receiver<Arc<NodeView>>,
    mut shutdown: watch::Receiver<bool>,
    progress: WorkerBeat,
) {
    let WatchedRequests {
        store,
        changes: mut changed,
    } = requests;
    let mut requeue = MAX_REQUEUE;
    let mut last_housekeeping = Instant::now();
    loop {
        tokio::select! {
            _ = changed.changed() => {}
            _ = views.changed() => {}
            Some(done) = reports.recv() => controller.finish(done),
            _ = controller.woken() => {}
            _ = tokio::time::sleep(requeue) => {}
            _ = shutdown.changed() => {}
        }
        progress.beat();
        if *shutdown.borrow() {
            break;
        }
        let view = views.borrow().clone();
        let objects = store.state();
        hang_here_if_told(progress.name(), !objects.is_empty()).await;
        requeue = controller
            .sync(&objects, &view)
            .await
            .map_or(MAX_REQUEUE, |after| after.min(MAX_REQUEUE));
        if last_housekeeping.elapsed() > HOUSEKEEPING_PERIOD {
            controller.housekeep(&objects).await;
            last_housekeeping = Instant::now();
        }
    }
    watch_task.abort();
    while controller.busy() {
        match reports.recv().await {
            Some(done) => controller.finish(done),
            None => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use ::kube::api::{ApiResource, GroupVersionKind};
    use ::kube::runtime::reflector;

    use super::*;

    /// What the scripted controller saw, shared with the test.
    #[derive(Default)]
    struct Log {
        passes: usize,
        finished: Vec<&'static str>,
        /// Work the controller reports as under way.
        busy: usize,
    }

    struct Scripted(Arc<Mutex<Log>>);

    impl RequestController for Scripted {
        type Done = &'static str;
        const WORKER: &'static str = "scripted";

        async fn sync(&mut self, _: &[Arc<DynamicObject>], _: &NodeView) -> Option<Duration> {
            self.0.lock().expect("log").passes += 1;
            None
        }

        fn finish(&mut self, done: &'static str) {
            let mut log = self.0.lock().expect("log");
            log.finished.push(done);
            log.busy = log.busy.saturating_sub(1);
        }

        fn busy(&self) -> bool {
            self.0.lock().expect("log").busy > 0
        }
    }

    /// The loop running `Scripted(log)` on no requests, and what the test drives it with.
    struct Harness {
        looping: tokio::task::JoinHandle<()>,
        reports: mpsc::Sender<&'static str>,
        shutdown: watch::Sender<bool>,
        /// Held: a closed channel would wake the loop at once, again and again.
        _changes: watch::Sender<u64>,
        _views: watch::Sender<Arc<NodeView>>,
    }

    fn start(log: &Arc<Mutex<Log>>) -> Harness {
        let resource =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("t", "v1", "T"), "ts");
        let writer = reflector::store::Writer::<DynamicObject>::new(resource);
        let (changes_tx, changes) = watch::channel(0);
        let requests = WatchedRequests {
            store: writer.as_reader(),
            changes,
        };
        let (reports_tx, reports) = mpsc::channel(4);
        let loop_reports = (reports_tx.clone(), reports);
        let (views_tx, views) = watch::channel(Arc::new(NodeView::default()));
        let (shutdown_tx, shutdown) = watch::channel(false);
        let watch_task = tokio::spawn(std::future::pending::<()>());
        let looping = tokio::spawn(run_request_loop(
            Scripted(log.clone()),
            loop_reports,
            requests,
            watch_task,
            views,
            shutdown,
            crate::health::Health::new(crate::health::Heartbeat::default())
                .worker("scripted", MAX_REQUEUE),
        ));
        Harness {
            looping,
            reports: reports_tx,
            shutdown: shutdown_tx,
            _changes: changes_tx,
            _views: views_tx,
        }
    }

    /// A report of finished work is taken in and followed by a pass; at shutdown the loop
    /// waits for the work still under way and takes in its report before it returns.
    #[tokio::test(start_paused = true)]
    async fn shutdown_waits_for_the_work_under_way() {
        let log = Arc::new(Mutex::new(Log {
            busy: 2,
            ..Log::default()
        }));
        let harness = start(&log);
        harness.reports.send("first").await.expect("send");
        tokio::time::sleep(Duration::from_millis(10)).await;
        {
            let log = log.lock().expect("log");
            assert_eq!(log.finished, ["first"]);
            assert!(log.passes >= 1, "a pass follows the report");
        }
        harness.shutdown.send(true).expect("shutdown");
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(
            !harness.looping.is_finished(),
            "one piece of work is still under way"
        );
        harness.reports.send("second").await.expect("send");
        tokio::time::timeout(Duration::from_secs(1), harness.looping)
            .await
            .expect("returns once the work reported")
            .expect("no panic");
        assert_eq!(log.lock().expect("log").finished, ["first", "second"]);
    }

    /// Without any change, the requests are still looked at every second.
    #[tokio::test(start_paused = true)]
    async fn requests_are_looked_at_every_second_without_a_change() {
        let log = Arc::new(Mutex::new(Log::default()));
        let harness = start(&log);
        tokio::time::sleep(Duration::from_millis(10_500)).await;
        assert_eq!(log.lock().expect("log").passes, 10);
        harness.shutdown.send(true).expect("shutdown");
        harness.looping.await.expect("no panic");
    }
}
