//! What every restarter does between deciding a kill and starting it, in one order: confirm with
//! the runtime that the container still runs under this pod's labels (a stale view must never
//! direct a kill at a replaced container), journal the intent (a resumed kill keeps the record
//! its first attempt made), and note the kill in the ledger for the restart metrics.

use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;

use super::journal::{JournalError, KillIntent, KillJournal, Unsynced};
use super::kill::KillOrder;
use super::ledger::KillLedger;
use crate::cri::{CriClient, CriError, PodLabels};
use crate::nodeview::Trigger;

/// A kill cleared to start.
pub struct Prepared {
    /// The journal record, to be synced beside the kill (`None` for a resumed kill).
    pub unsynced: Option<Unsynced>,
    /// The runtime's answer about the container, for the reaction log line.
    pub confirm_took: Duration,
    /// The journal append.
    pub journal_took: Duration,
}

/// Why a decided kill does not start now; the next pass decides again.
#[derive(Debug, thiserror::Error)]
pub enum NotPrepared {
    #[error("the runtime shows another container, or none, since the view was taken")]
    Replaced,
    #[error("cannot confirm the container with the runtime: {0}")]
    Runtime(CriError),
    #[error("cannot record the kill intent, so no kill: {0}")]
    Journal(JournalError),
}

/// Confirms, journals under `key` and notes the kill for `trigger`. Nothing is journalled or
/// noted unless the container still runs. Why a kill does not start is logged here, at its level
/// (a replaced container is routine; a runtime or journal failure is not).
pub async fn prepare_kill(
    cri: &CriClient,
    journal: &mut KillJournal,
    ledger: &KillLedger,
    trigger: Trigger,
    key: &str,
    order: &KillOrder,
    pod: PodLabels<'_>,
) -> Result<Prepared, NotPrepared> {
    let result = confirm_and_record(cri, journal, ledger, trigger, key, order, pod).await;
    if let Err(err) = &result {
        let container = order.container.as_str();
        match err {
            NotPrepared::Replaced => tracing::debug!(container, error = %err, "deciding again"),
            NotPrepared::Runtime(_) => tracing::warn!(container, error = %err, "deciding again"),
            NotPrepared::Journal(_) => tracing::error!(container, error = %err, "not stopping"),
        }
    }
    result
}

async fn confirm_and_record(
    cri: &CriClient,
    journal: &mut KillJournal,
    ledger: &KillLedger,
    trigger: Trigger,
    key: &str,
    order: &KillOrder,
    pod: PodLabels<'_>,
) -> Result<Prepared, NotPrepared> {
    let confirming = Instant::now();
    match cri
        .still_running(&order.container_id, pod, &order.container)
        .await
    {
        Ok(true) => {}
        Ok(false) => return Err(NotPrepared::Replaced),
        Err(err) => return Err(NotPrepared::Runtime(err)),
    }
    let confirm_took = confirming.elapsed();
    let recording = Instant::now();
    let unsynced = if order.resumed {
        // The first attempt's record, and its time in the ledger, stand.
        ledger.remember(&order.container_id, trigger, Timestamp::now());
        None
    } else {
        let intent = KillIntent {
            key: key.to_owned(),
            container: order.container.clone(),
            container_id: order.container_id.clone(),
            started_ms: Timestamp::now().as_millisecond(),
            grace_ms: i64::try_from(order.grace.as_millis()).unwrap_or(i64::MAX / 2),
        };
        let unsynced = journal.record(intent).map_err(NotPrepared::Journal)?;
        ledger.record(&order.container_id, trigger);
        Some(unsynced)
    };
    Ok(Prepared {
        unsynced,
        confirm_took,
        journal_took: recording.elapsed(),
    })
}
