//! The agent at node scale (issue 13), against real containerd: every pod's containers really
//! run. Measures, for the release build of the agent with production settings (2 s refresh):
//! start-up to READY=1 and to /readyz, RSS and CPU idle and during a burst of in-place restarts,
//! the cost of one node-view refresh (CRI listing, join, hashing), CRR reaction at scale next to
//! the raw StopContainer time, and optionally RSS over a soak. Needs `tests/node/containerd.sh up`.
//!
//!     cargo bench -p inplaced --bench node_scale [-- PODS [BURST [IDLE_SECONDS [SOAK_SECONDS]]]]
//!
//! Defaults: 250 pods of 3 containers, a burst of 50 CRRs, 60 s idle, no soak.

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use inplaced::cri::{CriClient, CriConfig};
use inplaced::kube::CachedPod;
use inplaced::nodeview::{self, HashCache, RuntimeTracker};
use kube::api::{Api, ListParams};
use serde_json::{Value, json};
use support::agent::AgentProcess;
use support::measure::{percentile, summary, ticks_per_second, usage, watch_usage};
use support::sandbox::{NS, Node, NodeOptions, all_running, container_id};
use support::unique;

/// CRRs measured one at a time (on as many pods, the first ones).
const REACTIONS: usize = 50;

/// Sleeps in the background so that the shell is idle, and exits on SIGTERM at once.
const IDLE_APP: &str = "trap 'exit 0' TERM; while true; do sleep 30 & wait $!; done";

/// Three Burstable containers that idle and stop at once on SIGTERM.
fn pod_spec(node: &str) -> Value {
    let container = |name: &str| {
        json!({"name": name, "image": "localhost/busybox:local",
               "command": ["/bin/sh", "-c", IDLE_APP],
               "resources": {"requests": {"cpu": "10m", "memory": "16Mi"},
                             "limits": {"cpu": "100m", "memory": "32Mi"}}})
    };
    json!({"nodeName": node, "hostNetwork": true, "terminationGracePeriodSeconds": 5,
           "containers": [container("app"), container("side"), container("log")]})
}

/// One kill as the agent logged it.
struct LoggedKill {
    crr: String,
    reaction: Duration,
    /// From the watch event to the start of the controller pass that issued the kill.
    before_pass: Duration,
    confirm: Duration,
    journal: Duration,
}

/// The kills the agent logged:
/// `crr=NAME ... reaction=Some(D) before_pass=Some(D) confirm_took=D journal_took=D`.
fn kill_reactions(log: &str) -> Vec<LoggedKill> {
    log.lines()
        .filter(|l| l.contains("stopping container for ContainerRecreateRequest"))
        .filter_map(|l| {
            let field = |key: &str| {
                let at = l.find(key)? + key.len();
                l[at..].split_whitespace().next()
            };
            Some(LoggedKill {
                crr: field(" crr=")?.to_owned(),
                reaction: debug_duration(field(" reaction=Some(")?.trim_end_matches(')'))?,
                before_pass: debug_duration(field(" before_pass=Some(")?.trim_end_matches(')'))?,
                confirm: debug_duration(field(" confirm_took=")?)?,
                journal: debug_duration(field(" journal_took=")?)?,
            })
        })
        .collect()
}

/// Time the process's threads have spent runnable but not running, summed over its threads
/// (the second field of each thread's `schedstat`).
fn run_queue_wait(pid: u32) -> Duration {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Duration::ZERO;
    };
    let ns: u64 = tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum();
    Duration::from_nanos(ns)
}

/// Parses Rust's `Debug` of a `Duration` (`812ns`, `3.2µs`, `4.15ms`, `1.2s`).
fn debug_duration(text: &str) -> Option<Duration> {
    let units = [("ns", 1e-9), ("µs", 1e-6), ("ms", 1e-3), ("s", 1.0)];
    let (number, scale) = units
        .iter()
        .find_map(|(unit, scale)| Some((text.strip_suffix(unit)?, scale)))?;
    number
        .parse::<f64>()
        .ok()
        .map(|n| Duration::from_secs_f64(n * scale))
}

/// Starts the node's agent afresh and times READY=1 and /readyz from the process start.
fn restart_agent(node: &mut Node) -> (Duration, Duration) {
    drop(node.agent.take());
    let args = node.agent_arguments();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let started = Instant::now();
    let mut agent = AgentProcess::start(&args, None);
    agent.wait_notification(Duration::from_secs(30), |l| l == "READY=1");
    let ready = started.elapsed();
    while !matches!(agent.get("/readyz"), Ok((200, _))) {
        assert!(started.elapsed() < Duration::from_secs(60), "never ready");
        std::thread::sleep(Duration::from_millis(2));
    }
    let readyz = started.elapsed();
    node.agent = Some(agent);
    (ready, readyz)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = support::measure::numeric_args();
    let pods = args.first().copied().unwrap_or(250) as usize;
    let burst = (args.get(1).copied().unwrap_or(50) as usize).min(pods);
    let idle = Duration::from_secs(args.get(2).copied().unwrap_or(60));
    let soak = Duration::from_secs(args.get(3).copied().unwrap_or(0));

    let mut node =
        Node::start_with(NodeOptions::kubelet("v1.30.7").agent_args(&["--refresh-interval", "2s"]))
            .await;
    println!(
        "node-scale: {pods} pods x 3 containers (all real), kubelet stand-in v1.30.7 (1 s sync), agent refresh 2 s"
    );
    let created = Instant::now();
    let names: Vec<String> = (0..pods).map(|_| unique("scale")).collect();
    // In batches, as a node fills up: hundreds of RunPodSandbox calls at once overrun the CRI
    // deadlines on two cores.
    for batch in names.chunks(25) {
        for name in batch {
            node.server
                .store()
                .create(
                    "pods",
                    json!({"metadata": {"name": name, "namespace": NS}, "spec": pod_spec(&node.node)}),
                )
                .expect("create pod");
        }
        for name in batch {
            node.wait_pod(name, Duration::from_secs(300), all_running)
                .await;
        }
    }
    println!(
        "pods running after {:.1} s",
        created.elapsed().as_secs_f64()
    );

    // Profiling: `NODE_SCALE_HOLD=SECONDS` keeps the node up that long after the pods run and
    // prints how to start another agent against it (under valgrind, perf, heaptrack...).
    if let Some(hold) = std::env::var("NODE_SCALE_HOLD")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        drop(node.agent.take());
        println!(
            "holding {hold} s; agent: {} agent --listen-address 127.0.0.1:0 --admin-socket /tmp/node-scale-admin.sock {}",
            env!("CARGO_BIN_EXE_inplaced"),
            node.agent_arguments().join(" ")
        );
        tokio::time::sleep(Duration::from_secs(hold)).await;
    }

    // Start-up, three times.
    for round in 1..=3 {
        let (ready, readyz) = restart_agent(&mut node);
        println!(
            "start-up {round}: READY=1 after {:.1} ms, /readyz 200 after {:.1} ms",
            ready.as_secs_f64() * 1e3,
            readyz.as_secs_f64() * 1e3
        );
    }
    let pid = node.agent().pid();
    // Idle means steady state: the first listings have fetched every container's times (64
    // per refresh) and the listings have slowed down.
    tokio::time::sleep(Duration::from_secs(60)).await;
    let (peak, mean, cpu) = watch_usage(pid, idle, Duration::from_secs(1)).await;
    println!(
        "idle {} s: RSS mean {mean:.1} MiB, peak {peak:.1} MiB; CPU {cpu:.3} % of one core",
        idle.as_secs()
    );
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    let field = |name: &str| {
        rollup
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    };
    println!(
        "idle RSS by kind: anonymous {:.1} MiB, file-backed (the binary's pages) {:.1} MiB",
        field("Anonymous:"),
        field("Rss:") - field("Anonymous:")
    );

    // One refresh, in this process: CRI listing, join with the API's pods, hashing.
    let cri = CriClient::new(CriConfig::new(support::endpoint()));
    let mut tracker = RuntimeTracker::new(cri).with_status_budget(usize::MAX);
    let api: Api<CachedPod> = Api::all(node.client.clone());
    let listed: Vec<std::sync::Arc<CachedPod>> = api
        .list(&ListParams::default().fields(&format!("spec.nodeName={}", node.node)))
        .await
        .expect("list pods")
        .items
        .into_iter()
        .map(std::sync::Arc::new)
        .collect();
    let (mut listing, mut joining, mut cold, mut warm) = (vec![], vec![], vec![], vec![]);
    let mut snapshot = tracker.refresh().await.expect("refresh");
    let mut cache = HashCache::default();
    for _ in 0..20 {
        let t = Instant::now();
        snapshot = tracker.refresh().await.expect("refresh");
        listing.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let mut view = nodeview::join(&node.node, &listed, &snapshot);
        joining.push(t.elapsed().as_secs_f64() * 1e3);
        let mut fresh = HashCache::default();
        let mut cold_view = view.clone();
        let t = Instant::now();
        nodeview::annotate(&mut cold_view, &mut fresh);
        cold.push(t.elapsed().as_secs_f64() * 1e3);
        nodeview::annotate(&mut view, &mut cache);
        let t = Instant::now();
        nodeview::annotate(&mut view, &mut cache);
        warm.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let containers: usize = snapshot.containers.len();
    println!(
        "refresh: CRI listing ({containers} containers) {}",
        summary(listing)
    );
    println!(
        "refresh: join with {} API pods {}",
        listed.len(),
        summary(joining)
    );
    println!(
        "refresh: era detection, cold cache (one hash per container and release era) {}",
        summary(cold.clone())
    );
    cold.sort_by(f64::total_cmp);
    println!(
        "refresh: per container, cold: {:.1} us",
        percentile(&cold, 0.5) * 1e3 / (pods * 3) as f64
    );
    println!("refresh: era detection, warm cache {}", summary(warm));

    // CRR reaction at scale, one at a time: created -> StopContainer at the runtime. The agent
    // asks the runtime once on the way (ContainerStatus of the target, right before the kill):
    // the reaction without the runtime's answering time is the agent's own overhead.
    let mut reaction = Vec::new();
    let mut overhead = Vec::new();
    let mut measured = HashSet::new();
    // Per CRR, how long the agent's threads (summed) were runnable but waiting for a core.
    let mut queued = HashMap::new();
    for name in names.iter().take(REACTIONS) {
        let pod = node
            .wait_pod(name, Duration::from_secs(60), all_running)
            .await;
        let old = container_id(&pod, "app");
        let answered_before = node.proxy.upstream_time("ContainerStatus", &old);
        let waited_before = run_queue_wait(node.agent().pid());
        let crr = node.store_crr(&pod, &["app"]).expect("create CRR");
        let t = Instant::now();
        while node.proxy.stop_count(&old) == 0 {
            assert!(t.elapsed() < Duration::from_secs(30), "no kill for {crr}");
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        let took = t.elapsed();
        let runtime = node
            .proxy
            .upstream_time("ContainerStatus", &old)
            .saturating_sub(answered_before);
        reaction.push(took.as_secs_f64() * 1e3);
        overhead.push(took.saturating_sub(runtime).as_secs_f64() * 1e3);
        queued.insert(
            crr.clone(),
            run_queue_wait(node.agent().pid()).saturating_sub(waited_before),
        );
        measured.insert(crr);
    }
    println!(
        "CRR created -> StopContainer at the runtime, one at a time: {}",
        summary(reaction)
    );
    println!(
        "  of which the agent's own (without the runtime answering its ContainerStatus): {}",
        summary(overhead)
    );
    // The same from the agent's side, from its log: its watch event to the kill issued (the API
    // double's delivery and the proxy's hop left out), and that without the one ContainerStatus
    // round trip to the runtime (the check that the target still runs): the agent's own work,
    // the kill journal's write included (its sync to disk runs beside the kill).
    let kills: Vec<_> = kill_reactions(&node.agent().log())
        .into_iter()
        .filter(|k| measured.contains(&k.crr))
        .collect();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "  the agent's reaction, its watch event -> kill issued (its log, n={}): {}",
        kills.len(),
        summary(kills.iter().map(|k| ms(k.reaction)).collect())
    );
    println!(
        "    its ContainerStatus round trip: {}",
        summary(kills.iter().map(|k| ms(k.confirm)).collect())
    );
    println!(
        "    the agent's own (without that round trip; the kill journal's write included): {}",
        summary(
            kills
                .iter()
                .map(|k| ms(k.reaction.saturating_sub(k.confirm)))
                .collect()
        )
    );
    println!(
        "    of which before the controller's pass began: {}",
        summary(kills.iter().map(|k| ms(k.before_pass)).collect())
    );
    println!(
        "    of which the kill journal's write: {}",
        summary(kills.iter().map(|k| ms(k.journal)).collect())
    );
    println!(
        "  the agent's threads' wait for a core during each CRR (summed over threads): {}",
        summary(queued.values().map(|d| ms(*d)).collect())
    );
    let own = |k: &LoggedKill| k.reaction.saturating_sub(k.confirm);
    let mut slowest: Vec<&LoggedKill> = kills.iter().collect();
    slowest.sort_by_key(|k| std::cmp::Reverse(own(k)));
    for k in slowest.iter().take(3) {
        println!(
            "    slowest: {} the agent's own {:.2} ms (before_pass {:.2} ms), its threads' wait for a core during that CRR {:.2} ms",
            k.crr,
            ms(own(k)),
            ms(k.before_pass),
            queued.get(&k.crr).map_or(f64::NAN, |d| ms(*d))
        );
    }

    // Raw StopContainer of the same kind of container, straight to containerd.
    let client = support::client();
    let pod = support::TestPod::run(&client, "raw-stop").await;
    let mut raw = Vec::new();
    for i in 0..20 {
        let id = pod
            .start_container(&client, &format!("c{i}"), IDLE_APP, "1")
            .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let t = Instant::now();
        client
            .stop_container(&id, Duration::from_secs(5))
            .await
            .expect("stop");
        raw.push(t.elapsed().as_secs_f64() * 1e3);
    }
    pod.remove(&client).await;
    println!(
        "raw StopContainer (SIGTERM-handling container): {}",
        summary(raw)
    );

    // A burst: one CRR for each of `burst` pods at once.
    for name in names.iter().take(REACTIONS) {
        node.wait_pod(name, Duration::from_secs(60), all_running)
            .await;
    }
    // Pods the one-at-a-time round did not touch, as far as there are enough.
    let skip = REACTIONS.min(pods - burst);
    let pods_now: Vec<Value> = names
        .iter()
        .skip(skip)
        .take(burst)
        .filter_map(|n| node.pod(n))
        .collect();
    let usage_task = tokio::spawn(watch_usage(
        pid,
        Duration::from_secs(20),
        Duration::from_millis(100),
    ));
    let t = Instant::now();
    let crrs: Vec<String> = pods_now
        .iter()
        .map(|p| node.store_crr(p, &["app"]).expect("create CRR"))
        .collect();
    for crr in &crrs {
        node.wait_completed(crr, Duration::from_secs(120)).await;
    }
    let burst_took = t.elapsed();
    let (peak, mean, cpu) = usage_task.await.expect("usage");
    println!(
        "burst of {burst} CRRs: all Completed after {:.1} s; over 20 s from its start: RSS mean {mean:.1} MiB, peak {peak:.1} MiB, CPU {cpu:.2} % of one core",
        burst_took.as_secs_f64()
    );

    if !soak.is_zero() {
        // Soak: a CRR every 10 s round robin, RSS every 10 s.
        let t = Instant::now();
        let mut samples = Vec::new();
        let (_, cpu_before) = usage(pid);
        let mut i = 0;
        while t.elapsed() < soak {
            if let Some(pod) = node.pod(&names[i % names.len()])
                && all_running(&pod)
            {
                node.store_crr(&pod, &["app"]);
            }
            i += 1;
            samples.push((t.elapsed().as_secs(), usage(pid).0 as f64 / 1024.0));
            tokio::time::sleep(Duration::from_secs(10)).await;
        }
        let (_, cpu_after) = usage(pid);
        let first = samples.iter().take(6).map(|s| s.1).fold(0.0, f64::max);
        let last = samples
            .iter()
            .rev()
            .take(6)
            .map(|s| s.1)
            .fold(0.0, f64::max);
        let peak = samples.iter().map(|s| s.1).fold(0.0, f64::max);
        println!(
            "soak {} s, {i} CRRs: RSS max of first minute {first:.1} MiB, of last minute {last:.1} MiB, peak {peak:.1} MiB; CPU {:.3} % of one core",
            soak.as_secs(),
            (cpu_after - cpu_before) as f64 / ticks_per_second() / t.elapsed().as_secs_f64()
                * 100.0
        );
        println!("soak RSS samples (s, MiB): {samples:?}");
    }
    node.stop().await;
}
