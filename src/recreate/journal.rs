//! The kill journal: before the agent stops a container for a request, it appends the intent
//! here and fsyncs, so that an agent killed at any point and restarted knows which kills it may
//! already have issued. That is what keeps "at most one kill per container per request" true
//! across crashes without an API round trip in front of every kill.
//!
//! Format: one JSON object per line, append-only; a torn last line (crash mid-write) is skipped.
//! Compaction rewrites the file without the entries of finished requests (write, fsync, rename).

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KillIntent {
    pub crr_uid: String,
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
    file: File,
    entries: Vec<KillIntent>,
}

const FILE_NAME: &str = "kill-journal.jsonl";

impl KillJournal {
    /// Opens (creating) the journal under `state_dir`, loading what earlier runs recorded.
    pub fn open(state_dir: &Path) -> Result<KillJournal, JournalError> {
        Self::open_named(state_dir, FILE_NAME)
    }

    /// Opens (creating) a journal of another name under `state_dir`: each writer keeps its own
    /// file, so one's compaction never races another's appends.
    pub fn open_named(state_dir: &Path, file_name: &str) -> Result<KillJournal, JournalError> {
        let path = state_dir.join(file_name);
        let error = |source| JournalError {
            path: path.display().to_string(),
            source,
        };
        std::fs::create_dir_all(state_dir).map_err(error)?;
        std::fs::set_permissions(state_dir, std::fs::Permissions::from_mode(0o700))
            .map_err(error)?;
        let mut entries = Vec::new();
        match File::open(&path) {
            Ok(file) => {
                for line in BufReader::new(file).lines() {
                    let line = line.map_err(error)?;
                    match serde_json::from_str::<KillIntent>(&line) {
                        Ok(entry) => entries.push(entry),
                        Err(err) => {
                            tracing::warn!(error = %err, "skipping a torn or corrupt kill journal line")
                        }
                    }
                }
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(error(err)),
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&path)
            .map_err(error)?;
        sync_dir(state_dir).map_err(error)?;
        Ok(KillJournal {
            path,
            file,
            entries,
        })
    }

    /// Appends an intent and waits until it is on disk.
    pub fn record(&mut self, intent: KillIntent) -> Result<(), JournalError> {
        let error = |source| JournalError {
            path: self.path.display().to_string(),
            source,
        };
        let mut line = serde_json::to_vec(&intent).map_err(|e| error(e.into()))?;
        line.push(b'\n');
        self.file.write_all(&line).map_err(error)?;
        self.file.sync_data().map_err(error)?;
        self.entries.push(intent);
        Ok(())
    }

    /// The latest intent for a request's container.
    pub fn find(&self, crr_uid: &str, container: &str) -> Option<&KillIntent> {
        self.entries
            .iter()
            .rev()
            .find(|e| e.crr_uid == crr_uid && e.container == container)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
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
        self.file = OpenOptions::new()
            .append(true)
            .open(&self.path)
            .map_err(error)?;
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
            crr_uid: crr.into(),
            container: container.into(),
            container_id: format!("{container}-id"),
            started_ms: 1,
            grace_ms: 2,
        }
    }

    #[test]
    fn intents_survive_reopening_and_a_torn_last_line() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut journal = KillJournal::open(dir.path()).unwrap();
            journal.record(intent("r1", "a")).unwrap();
            journal.record(intent("r1", "b")).unwrap();
        }
        // A crash in the middle of the next append.
        let mut file = OpenOptions::new()
            .append(true)
            .open(dir.path().join(FILE_NAME))
            .unwrap();
        file.write_all(b"{\"crr_uid\":\"r2\",\"cont").unwrap();
        drop(file);
        let journal = KillJournal::open(dir.path()).unwrap();
        assert_eq!(journal.len(), 2);
        assert_eq!(journal.find("r1", "b").unwrap().container_id, "b-id");
        assert!(journal.find("r2", "a").is_none());
        let mode = std::fs::metadata(dir.path().join(FILE_NAME))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn retain_compacts_durably() {
        let dir = tempfile::tempdir().unwrap();
        let mut journal = KillJournal::open(dir.path()).unwrap();
        journal.record(intent("r1", "a")).unwrap();
        journal.record(intent("r2", "a")).unwrap();
        journal.retain(|e| e.crr_uid == "r2").unwrap();
        journal.record(intent("r3", "a")).unwrap();
        let reopened = KillJournal::open(dir.path()).unwrap();
        assert!(reopened.find("r1", "a").is_none());
        assert!(reopened.find("r2", "a").is_some() && reopened.find("r3", "a").is_some());
        assert_eq!(reopened.len(), 2);
    }
}
