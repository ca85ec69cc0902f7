//! How long recording a kill intent takes: the write, which a kill waits for, and the sync to
//! disk, which runs beside the kill. Quiet, and beside another process's heavy writes.
//!
//! `cargo bench -p inplaced --bench journal_sync [-- INTENTS [DIR]]`: DIR (default: the temp
//! directory) should be on the filesystem that will hold the agent's state directory. Results
//! are in BENCHMARKS.md ("Kill journal sync").

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use inplaced::restart::{KillIntent, KillJournal};

fn intent(n: usize) -> KillIntent {
    KillIntent {
        key: format!("3f1c9a52-7d4e-4b8a-9c1e-{n:012}"),
        container: "app".into(),
        container_id: format!("{n:064x}"),
        started_ms: 1_764_000_000_000 + n as i64,
        grace_ms: 30_000,
    }
}

/// Another process's writes: 4 MiB at a time, flushed, over and over (container logs, image
/// unpacking, builds on a shared node).
fn disk_load(dir: &Path, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    let path = dir.join("load.bin");
    std::thread::spawn(move || {
        let block = vec![0x5au8; 4 << 20];
        while !stop.load(Ordering::Relaxed) {
            let Ok(mut file) = std::fs::File::create(&path) else {
                return;
            };
            for _ in 0..4 {
                if file.write_all(&block).is_err() {
                    return;
                }
            }
            let _ = file.sync_all();
        }
        let _ = std::fs::remove_file(&path);
    })
}

fn summary(mut ms: Vec<f64>) -> String {
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((ms.len() as f64 - 1.0) * q).round() as usize];
    format!(
        "p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        at(0.5),
        at(0.9),
        at(0.99),
        at(1.0)
    )
}

fn run(dir: &Path, intents: usize, loaded: bool) {
    let journal_dir = tempfile::tempdir_in(dir).expect("temp dir");
    let mut journal = KillJournal::open(journal_dir.path()).expect("journal");
    let stop = Arc::new(AtomicBool::new(false));
    let load = loaded.then(|| disk_load(dir, stop.clone()));
    let (mut write_ms, mut sync_ms) = (Vec::new(), Vec::new());
    for n in 0..intents {
        let t = Instant::now();
        let unsynced = journal.record(intent(n)).expect("record");
        write_ms.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        unsynced.sync().expect("sync");
        sync_ms.push(t.elapsed().as_secs_f64() * 1e3);
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::Relaxed);
    if let Some(load) = load {
        let _ = load.join();
    }
    let what = if loaded {
        "beside 16 MiB write+fsync cycles"
    } else {
        "quiet"
    };
    println!("{intents} intents, {what}:");
    println!("  write (before the kill): {}", summary(write_ms));
    println!("  sync (beside the kill):  {}", summary(sync_ms));
}

fn main() {
    // `cargo bench` passes `--bench`; positional arguments follow `--`.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let intents = args.first().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let dir = args
        .get(1)
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    println!("directory: {}", dir.display());
    run(&dir, intents, false);
    run(&dir, intents, true);
}
