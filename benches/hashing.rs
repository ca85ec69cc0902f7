//! Container hashing throughput over the golden corpus (553 inputs), single thread.
//!
//! `cargo bench -p inplaced --bench hashing`; results and the Go baseline are in BENCHMARKS.md.
//! Groups: era A (kubelet 1.26) and era C (1.36), each over all inputs and without the four huge
//! `big-*` inputs. Throughput is reported in hashes (elements) per second.
//!
//! The machine is shared with concurrent builds, so time is measured as the benchmark thread's
//! on-CPU time (`/proc/thread-self/schedstat`), not wall time; on an idle machine the two agree.
//! Set `INPLACED_BENCH_WALL=1` to measure wall time instead.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use inplaced::hashing::{HashOptions, KubeletVersion, hash_container};

fn corpus() -> Vec<(String, Vec<u8>)> {
    let dir = node_sandbox::golden::golden_dir();
    let text = std::fs::read_to_string(dir.join("kubelet-1.26.15.jsonl"))
        .unwrap_or_else(|e| panic!("golden corpus in {}: {e}", dir.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("golden line");
            let tag = v["tag"].as_str().unwrap_or_default().to_owned();
            let input = v["input_text"]
                .as_str()
                .expect("input_text")
                .as_bytes()
                .to_vec();
            (tag, input)
        })
        .collect()
}

/// This thread's on-CPU time so far (ns resolution), or None where schedstat is unavailable.
fn thread_cpu_time() -> Option<Duration> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = s.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

fn timed(iters: u64, mut f: impl FnMut()) -> Duration {
    let wall = std::env::var_os("INPLACED_BENCH_WALL").is_some();
    let (c0, w0) = (thread_cpu_time(), Instant::now());
    for _ in 0..iters {
        f();
    }
    match (wall, c0, thread_cpu_time()) {
        (false, Some(a), Some(b)) => b.saturating_sub(a),
        _ => w0.elapsed(),
    }
}

fn bench(c: &mut Criterion) {
    let all = corpus();
    let small: Vec<_> = all
        .iter()
        .filter(|(t, _)| !t.starts_with("big-"))
        .cloned()
        .collect();
    assert_eq!(all.len() - small.len(), 4, "four big-* inputs");
    for (era, version) in [("era A (1.26)", "1.26"), ("era C (1.36)", "1.36")] {
        let version = KubeletVersion::parse(version).expect("version");
        let opts = HashOptions::default();
        for (label, set) in [("all 553 inputs", &all), ("without big-*", &small)] {
            let mut g = c.benchmark_group(format!("{era}, {label}"));
            g.throughput(Throughput::Elements(set.len() as u64));
            g.bench_function("hash_container", |b| {
                b.iter_custom(|iters| {
                    timed(iters, || {
                        let mut acc = 0u64;
                        for (_, input) in set.iter() {
                            if let Ok(h) = hash_container(black_box(input), &version, &opts) {
                                acc ^= h.hash;
                            }
                        }
                        black_box(acc);
                    })
                })
            });
            g.finish();
        }
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).measurement_time(std::time::Duration::from_secs(4));
    targets = bench
}
criterion_main!(benches);
