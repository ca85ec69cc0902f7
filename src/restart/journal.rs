//! The kill journal: before the agent stops a container, it appends the intent here, so that an
//! agent killed at any point and restarted knows which kills it may already have issued. That
//! is what keeps "at most one kill per container per request" true across agent restarts
//! without an API round trip in front of every kill.
//!
//! Durability: an intent is written before its kill and synced to disk beside it. What a
//! process has written survives the process (the kernel holds it), so a restarted agent always
//! finds every intent whose kill may have begun; only the machine going down before the sync
//! ends can lose one, and that also ends every container of the node. The sync is kept off the
//! kill's path because on a busy disk it is the slowest step of a kill by far (BENCHMARKS.md,
//! "The kill journal's sync, off the kill's path").
//!
//! Format: one JSON object per line, append-only. A torn last line (a machine crash mid-write)
//! is skipped and cut off, so the next intent starts a line of its own.
//! Compaction rewrites the file without the entries of finished requests (write, fsync, rename),
//! on a blocking thread when it runs periodically ([`KillJournal::retain_off_runtime`]).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KillIntent {
    /// What the kill is for, unique per restarter: a ContainerRecreateRequest's UID, or an env
    /// restart's `env:<pod uid>:<expected hash>:<restart count>`. Written as `crr_uid`, the name
    /// journals written before env restarts shared this type carry.
    #[serde(rename = "crr_uid")]
    pub key: String,
    pub container: String,
    /// The runtime's container ID (without the `runtime://` prefix).
    pub container_id: String,
    /// Unix milliseconds when the kill (preStop + stop) began.
    pub started_ms: i64,
    /// The grace period the kill was given: SIGKILL was due at `started_ms + grace_ms`.
    pub grace_ms: i64,
}

#[derive(Debug, thiserror::Error)]
#[error("kill journal {path}: {source}")]
pub struct JournalError {
    path: String,
    source: std::io::Error,
}

pub struct KillJournal {
    path: PathBuf,
    file: Arc<File>,
    entries: Vec<KillIntent>,
}

/// An intent written but maybe not yet on disk: a restarted agent already finds it; [`sync`]
/// makes it outlive the machine too.
///
/// [`sync`]: Unsynced::sync
#[must_use = "an intent is on disk only once synced"]
pub struct Unsynced {
    path: PathBuf,
    file: Arc<File>,
}

impl Unsynced {
    /// Waits until the intent is on disk (blocking: call it off the async threads).
    pub fn sync(self) -> Result<(), JournalError> {
        self.file.sync_data().map_err(|source| JournalError {
            path: self.path.display().to_string(),
            source,
        })
    }

    /// Syncs beside the kill, on the journals' one sync thread. A failure is logged: the
    /// intent still guards against agent restarts, not against the machine going down.
    pub(crate) fn sync_in_background(self) {
        static SYNCER: OnceLock<Option<Sender<Unsynced>>> = OnceLock::new();
        let syncer = SYNCER.get_or_init(|| {
            let (tx, rx) = std::sync::mpsc::channel();
            let spawned = std::thread::Builder::new()
                .name("journal-sync".into())
                .spawn(move || sync_loop(rx));
            match spawned {
                Ok(_) => Some(tx),
                Err(err) => {
                    tracing::warn!(error = %err, "no kill journal sync thread; syncing in place");
                    None
                }
            }
        });
        let unsynced = match syncer {
            Some(tx) => match tx.send(self) {
                Ok(()) => return,
                Err(returned) => returned.0,
            },
            None => self,
        };
        unsynced.sync_logged();
    }

    fn sync_logged(self) {
        if let Err(err) = self.sync() {
            tracing::error!(error = %err, "a kill intent did not reach the disk");
        }
    }
}

/// Syncs what is queued, once per file for everything queued at that moment: a sync covers
/// every write made before it, so a burst of kills costs a few syncs, not one each.
fn sync_loop(queue: Receiver<Unsynced>) {
    while let Ok(first) = queue.recv() {
        let mut batch = vec![first];
        batch.extend(queue.try_iter());
        let mut synced: Vec<Arc<File>> = Vec::new();
        for unsynced in batch {
            if synced.iter().any(|f| Arc::ptr_eq(f, &unsynced.file)) {
                continue;
            }
            synced.push(unsynced.file.clone());
            unsynced.sync_logged();
        }
    }
}

const FILE_NAME: &str = "kill-journal.jsonl";

impl KillJournal {
    /// Opens (creating) the journal under `state_dir`, loading what earlier runs recorded.
    pub fn open(state_dir: &Path) -> Result<KillJournal, JournalError> {
        Self::open_named(state_dir, FILE_NAME)
    }

    /// Opens (creating) a journal of another name under `state_dir`: each writer keeps its own
    /// file, so one's compaction never races another's appends.
    pub(crate) fn open_named(
        state_dir: &Path,
        file_name: &str,
    ) -> Result<KillJournal, JournalError> {
        let path = state_dir.join(file_name);
        let error = |source| JournalError {
            path: path.display().to_string(),
            source,
        };
        std::fs::create_dir_all(state_dir).map_err(error)?;
        std::fs::set_permissions(state_dir, std::fs::Permissions::from_mode(0o700))
            .map_err(error)?;
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(err) => return Err(error(err)),
        };
        // Complete lines end with a newline; anything after the last one is a torn line.
        let end = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        let mut entries = Vec::new();
        for line in bytes[..end].split(|&b| b == b'\n') {
            if line.is_empty() {
                continue;
            }
            match serde_json::from_slice::<KillIntent>(line) {
                Ok(entry) => entries.push(entry),
                Err(err) => {
                    tracing::warn!(error = %err, "skipping a corrupt kill journal line")
                }
            }
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&path)
            .map_err(error)?;
        if end < bytes.len() {
            tracing::warn!(
                bytes = bytes.len() - end,
                "cutting off a torn last kill journal line"
            );
            file.set_len(end as u64).map_err(error)?;
            file.sync_all().map_err(error)?;
        }
        sync_dir(state_dir).map_err(error)?;
        Ok(KillJournal {
            path,
            file: Arc::new(file),
            entries,
        })
    }

    /// Appends an intent; a restarted agent finds it from now on. Sync the result beside the
    /// kill.
    pub fn record(&mut self, intent: KillIntent) -> Result<Unsynced, JournalError> {
        let error = |source| JournalError {
            path: self.path.display().to_string(),
            source,
        };
        let mut line = serde_json::to_vec(&intent).map_err(|e| error(e.into()))?;
        line.push(b'\n');
        (&*self.file).write_all(&line).map_err(error)?;
        self.entries.push(intent);
        Ok(Unsynced {
            path: self.path.clone(),
            file: self.file.clone(),
        })
    }

    /// The latest intent for a request's container.
    pub fn find(&self, key: &str, container: &str) -> Option<&KillIntent> {
        self.entries
            .iter()
            .rev()
            .find(|e| e.key == key && e.container == container)
    }

    /// Every intent recorded, oldest first.
    pub fn intents(&self) -> impl Iterator<Item = &KillIntent> {
        self.entries.iter()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// [`KillJournal::retain`] on a blocking thread, handing the journal back: a rewrite syncs
    /// a file and its directory, and on a slow disk that must not stall the runtime thread the
    /// whole agent shares. `None` only if that thread panicked; reopen the journal from disk.
    pub(crate) async fn retain_off_runtime(
        mut self,
        keep: impl Fn(&KillIntent) -> bool + Send + 'static,
    ) -> Option<(KillJournal, Result<(), JournalError>)> {
        tokio::task::spawn_blocking(move || {
            let result = self.retain(keep);
            (self, result)
        })
        .await
        .ok()
    }

    /// Keeps only the entries `keep` accepts, rewriting the file atomically.
    pub fn retain(&mut self, keep: impl Fn(&KillIntent) -> bool) -> Result<(), JournalError> {
        if self.entries.iter().all(&keep) {
            return Ok(());
        }
        let error = |source| JournalError {
            path: self.path.display().to_string(),
            source,
        };
        let kept: Vec<KillIntent> = self.entries.iter().filter(|e| keep(e)).cloned().collect();
        let temp = self.path.with_extension("jsonl.tmp");
        {
            let mut file = OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(true)
                .mode(0o600)
                .open(&temp)
                .map_err(error)?;
            for entry in &kept {
                let mut line = serde_json::to_vec(entry).map_err(|e| error(e.into()))?;
                line.push(b'\n');
                file.write_all(&line).map_err(error)?;
            }
            file.sync_all().map_err(error)?;
        }
        std::fs::rename(&temp, &self.path).map_err(error)?;
        if let Some(dir) = self.path.parent() {
            sync_dir(dir).map_err(error)?;
        }
        self.file = Arc::new(
            OpenOptions::new()
                .append(true)
                .open(&self.path)
                .map_err(error)?,
        );
        self.entries = kept;
        Ok(())
    }
}

/// Makes a new or renamed directory entry durable.
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn intent(crr: &str, container: &str) -> KillIntent {
        KillIntent {
            key: crr.into(),
            container: container.into(),
            container_id: format!("{container}-id"),
            started_ms: 1,
            grace_ms: 2,
        }
    }

    /// Journals written by earlier releases name the key `crr_uid`: an upgraded agent must
    /// still find the kills they record, and write lines an older agent can read back.
    #[test]
    fn the_line_format_is_that_of_earlier_releases() {
        let line = r#"{"crr_uid":"env:u1:abc:0","container":"app","container_id":"c1","started_ms":5,"grace_ms":30000}"#;
        let read: KillIntent = serde_json::from_str(line).unwrap();
        assert_eq!(read.key, "env:u1:abc:0");
        assert_eq!(serde_json::to_string(&read).unwrap(), line);
    }

    #[test]
    fn intents_survive_reopening_and_a_torn_last_line() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut journal = KillJournal::open(dir.path()).unwrap();
            journal.record(intent("r1", "a")).unwrap().sync().unwrap();
            journal.record(intent("r1", "b")).unwrap().sync().unwrap();
        }
        let path = dir.path().join(FILE_NAME);
        let whole = std::fs::read(&path).unwrap();
        // A crash in the middle of the next append.
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(b"{\"crr_uid\":\"r2\",\"cont").unwrap();
        drop(file);
        let mut journal = KillJournal::open(dir.path()).unwrap();
        assert_eq!(journal.len(), 2);
        assert_eq!(journal.find("r1", "b").unwrap().container_id, "b-id");
        assert!(journal.find("r2", "a").is_none());
        assert_eq!(
            std::fs::read(&path).unwrap(),
            whole,
            "the torn line is cut off"
        );
        // The next intent is a line of its own, not glued to the torn one.
        journal.record(intent("r3", "a")).unwrap().sync().unwrap();
        drop(journal);
        let journal = KillJournal::open(dir.path()).unwrap();
        assert_eq!(journal.len(), 3);
        assert_eq!(journal.find("r3", "a").unwrap().container_id, "a-id");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    /// An agent restarted before the sync finds the intent: it is written, not buffered.
    #[test]
    fn an_intent_is_found_before_it_is_synced() {
        let dir = tempfile::tempdir().unwrap();
        let mut journal = KillJournal::open(dir.path()).unwrap();
        let unsynced = journal.record(intent("r1", "a")).unwrap();
        let restarted = KillJournal::open(dir.path()).unwrap();
        assert_eq!(restarted.find("r1", "a"), Some(&intent("r1", "a")));
        unsynced.sync().unwrap();
    }

    #[test]
    fn a_corrupt_line_is_skipped_and_the_rest_kept() {
        let dir = tempfile::tempdir().unwrap();
        let good = serde_json::to_string(&intent("r1", "a")).unwrap();
        let text = format!("{good}\nnot json\n{}\n", good.replace("r1", "r2"));
        std::fs::write(dir.path().join(FILE_NAME), text).unwrap();
        let journal = KillJournal::open(dir.path()).unwrap();
        assert_eq!(journal.len(), 2);
        assert!(journal.find("r1", "a").is_some() && journal.find("r2", "a").is_some());
    }

    #[test]
    fn retain_compacts_durably() {
        let dir = tempfile::tempdir().unwrap();
        let mut journal = KillJournal::open(dir.path()).unwrap();
        journal.record(intent("r1", "a")).unwrap().sync().unwrap();
        journal.record(intent("r2", "a")).unwrap().sync().unwrap();
        journal.retain(|e| e.key == "r2").unwrap();
        journal.record(intent("r3", "a")).unwrap().sync().unwrap();
        let reopened = KillJournal::open(dir.path()).unwrap();
        assert!(reopened.find("r1", "a").is_none());
        assert!(reopened.find("r2", "a").is_some() && reopened.find("r3", "a").is_some());
        assert_eq!(reopened.len(), 2);
    }

    /// Periodic compaction runs beside the agent's one runtime thread, not on it: a task on
    /// that thread keeps running while the rewrite is under way (here a slow `keep` stands in
    /// for a slow disk), and the journal comes back compacted and still appending.
    #[tokio::test(flavor = "current_thread")]
    async fn compaction_off_the_runtime_thread_leaves_it_running() {
        let dir = tempfile::tempdir().unwrap();
        let mut journal = KillJournal::open(dir.path()).unwrap();
        journal.record(intent("r1", "a")).unwrap().sync().unwrap();
        journal.record(intent("r2", "a")).unwrap().sync().unwrap();
        let ticks = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let ticker = tokio::spawn({
            let ticks = ticks.clone();
            async move {
                loop {
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                    ticks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        });
        let (mut journal, result) = journal
            .retain_off_runtime(|e| {
                std::thread::sleep(std::time::Duration::from_millis(150));
                e.key == "r2"
            })
            .await
            .expect("the compaction thread ends");
        ticker.abort();
        result.unwrap();
        let ticks = ticks.load(std::sync::atomic::Ordering::Relaxed);
        assert!(
            ticks >= 10,
            "the runtime thread ran {ticks} times while the compaction took at least 450 ms"
        );
        journal.record(intent("r3", "a")).unwrap().sync().unwrap();
        let reopened = KillJournal::open(dir.path()).unwrap();
        assert!(reopened.find("r1", "a").is_none());
        assert!(reopened.find("r2", "a").is_some() && reopened.find("r3", "a").is_some());
        assert_eq!(reopened.len(), 2);
    }
}
