//! Measurements the benchmarks share: percentiles, and a process's memory and CPU from /proc.

use std::time::{Duration, Instant};

/// The benchmark's numeric command-line arguments, in order (cargo bench's own flags skipped).
pub fn numeric_args() -> Vec<u64> {
    std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect()
}

/// The `p` quantile (0..=1) of ascending `sorted` samples, nearest rank.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

/// "p50 …, p90 …, p99 …, max … (n=…)" of millisecond samples.
pub fn summary(mut samples: Vec<f64>) -> String {
    samples.sort_by(f64::total_cmp);
    format!(
        "p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms (n={})",
        percentile(&samples, 0.5),
        percentile(&samples, 0.9),
        percentile(&samples, 0.99),
        samples.last().copied().unwrap_or(0.0),
        samples.len()
    )
}

/// Resident set size (kB) and user+system CPU time (clock ticks) of a process.
pub fn usage(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start at ") ".
    let fields: Vec<&str> = stat
        .rsplit_once(") ")
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15 of /proc/pid/stat, 12 and 13 after the name.
    (rss, ticks(11) + ticks(12))
}

/// USER_HZ, the unit of /proc/<pid>/stat times: 100 on every Linux ABI this runs on.
pub fn ticks_per_second() -> f64 {
    100.0
}

/// Samples a process every `every` for `length`: (peak RSS MiB, mean RSS MiB, CPU % of one core).
pub async fn watch_usage(pid: u32, length: Duration, every: Duration) -> (f64, f64, f64) {
    let (_, cpu_before) = usage(pid);
    let started = Instant::now();
    let mut rss = Vec::new();
    while started.elapsed() < length {
        rss.push(usage(pid).0 as f64 / 1024.0);
        tokio::time::sleep(every).await;
    }
    let (_, cpu_after) = usage(pid);
    let cpu =
        (cpu_after - cpu_before) as f64 / ticks_per_second() / started.elapsed().as_secs_f64();
    let peak = rss.iter().copied().fold(0.0, f64::max);
    let mean = rss.iter().sum::<f64>() / rss.len().max(1) as f64;
    (peak, mean, cpu * 100.0)
}
