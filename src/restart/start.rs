//! Starting a decided kill, in the one order every restarter keeps. The restarter takes the
//! gate's claim itself (it says in its own words why it could not, and the env restarter spends
//! its restart budget only once it holds the claim), then:
//! 1. [`Restarter::prepare`]: no kill without the journal, then [`prepare_kill`], with a journal
//!    failure reported to health;
//! 2. its own bookkeeping (the container marked as being killed) and its log line;
//! 3. [`ReadyKill::launch`]: the pod's `Killing` event beside the kill, [`kill_and_report`] in
//!    the background with its end sent to the restarter's loop, and the journal record synced.

use tokio::sync::mpsc;

use super::gate::StopClaim;
use super::journal::KillJournal;
use super::kill::{KillError, KillOrder, kill_and_report};
use super::ledger::KillLedger;
use super::prepare::{NotPrepared, Prepared, prepare_kill};
use crate::cri::CriClient;
use crate::health::Health;
use crate::kube::events::PodEvents;
use crate::nodeview::{CrashBackoffView, PodView, Trigger};

/// What one restarter's kills have in common.
pub(crate) struct Restarter<'a> {
    pub cri: &'a CriClient,
    pub ledger: &'a KillLedger,
    /// What its kills are noted as in the ledger, for the restart metrics.
    pub trigger: Trigger,
    /// What its kills are for, as the "container stopped for …" log line names it.
    pub cause: &'static str,
    /// Where a journal failure is reported, under the restarter's health key: without its
    /// journal the restarter can start no kill at all. `None` for a restarter that only logs it.
    pub health: Option<(&'a Health, &'static str)>,
}

impl Restarter<'_> {
    /// Clears the kill `claim` was taken for: [`prepare_kill`] under the journal key `key`.
    /// `None` when it does not start now: there is no journal to record it in (the restarter
    /// has said why), or [`prepare_kill`] has logged why. The claim is then released and the
    /// next pass decides again.
    pub(crate) async fn prepare(
        &self,
        claim: StopClaim,
        order: KillOrder,
        journal: Option<&mut KillJournal>,
        key: &str,
        pod: &PodView,
    ) -> Option<ReadyKill> {
        debug_assert_eq!(claim.container_id(), order.container_id);
        let journal = journal?;
        let labels = pod.runtime_labels();
        match prepare_kill(
            self.cri,
            journal,
            self.ledger,
            self.trigger,
            key,
            &order,
            labels,
        )
        .await
        {
            Ok(prepared) => Some(ReadyKill {
                order,
                claim,
                prepared,
                cri: self.cri.clone(),
                cause: self.cause,
            }),
            Err(err) => {
                if let (NotPrepared::Journal(_), Some((health, health_key))) = (&err, self.health) {
                    health.set(health_key, Err(err.to_string()));
                }
                None
            }
        }
    }
}

/// A kill claimed and cleared: what is left is the restarter's own bookkeeping and log line,
/// then [`ReadyKill::launch`].
pub(crate) struct ReadyKill {
    order: KillOrder,
    claim: StopClaim,
    prepared: Prepared,
    cri: CriClient,
    cause: &'static str,
}

impl ReadyKill {
    pub(crate) fn order(&self) -> &KillOrder {
        &self.order
    }

    /// What clearing it took, for the restarter's log line.
    pub(crate) fn prepared(&self) -> &Prepared {
        &self.prepared
    }

    /// Starts the kill in the background. With `killing`, the pod's `Killing` event says
    /// "Stopping {killing}" and what the kubelet's crash back-off makes of the stop; it is
    /// emitted beside the kill, never awaited in front of it, so no API round trip delays a
    /// stop. The kill's end goes to `done`, as `end` words it for the restarter's loop.
    pub(crate) fn launch<T: Send + 'static>(
        self,
        events: PodEvents,
        pod: &PodView,
        killing: Option<&str>,
        done: &mpsc::Sender<T>,
        end: impl FnOnce(KillOrder, Result<(), KillError>) -> T + Send + 'static,
    ) {
        let ReadyKill {
            order,
            claim,
            prepared,
            cri,
            cause,
        } = self;
        let pod_ref = pod.event_ref();
        if let Some(killing) = killing {
            let backoff = pod
                .containers
                .iter()
                .find(|c| c.name == order.container)
                .and_then(|c| c.crash_backoff.as_ref());
            let message = format!(
                "Stopping {killing}{}",
                CrashBackoffView::after_a_stop(backoff)
            );
            events.emit(&pod_ref, "Killing", message, "Normal");
        }
        let pod_ip = pod.pod_ip.clone();
        let done = done.clone();
        tokio::spawn(async move {
            let result = kill_and_report(
                &cri,
                &order,
                claim,
                pod_ip.as_deref(),
                &events,
                &pod_ref,
                cause,
            )
            .await;
            let _ = done.send(end(order, result)).await;
        });
        if let Some(unsynced) = prepared.unsynced {
            unsynced.sync_in_background();
        }
    }
}
