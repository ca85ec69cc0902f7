//! What an idle agent costs the API server (issue 54), per node: requests per second with every
//! combination of the three request kinds' CRDs installed or not, and while one CRD is applied
//! and deleted again and again. Each case is one agent (the release build, production refresh)
//! on a node without pods, against its own API server double, all cases at once; the requests
//! are counted from the double's audit log over the window. Needs `tests/node/containerd.sh up`.
//!
//!     cargo bench -p inplaced --bench idle_api [-- WINDOW_SECONDS [CHURN_SECONDS]]
//!
//! Defaults: a 330 s window (longer than the 290 s after which kube-rs re-opens a watch, so the
//! re-opens are counted), a CRD applied or deleted every 30 s in the churn case.

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use support::agent::{LoneAgent, lone_agent};

const CRDS: [(&str, &str); 3] = [
    ("containerrecreaterequests.apps.kruise.io", "CRR"),
    ("containerresizerequests.inplaced.io", "resize"),
    ("containerrestartrequests.inplaced.io", "restart"),
];

struct Case {
    name: String,
    lone: LoneAgent,
}

async fn start_case(name: String, absent: &[&str]) -> Case {
    let lone = lone_agent(absent, &["--refresh-interval", "2s"]).await;
    Case { name, lone }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = support::measure::numeric_args();
    let window = Duration::from_secs(args.first().copied().unwrap_or(330));
    let churn_every = Duration::from_secs(args.get(1).copied().unwrap_or(30));

    let mut cases = Vec::new();
    for mask in 0..8u32 {
        let installed: Vec<&str> = CRDS
            .iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) != 0)
            .map(|(_, (_, short))| *short)
            .collect();
        let absent: Vec<&str> = CRDS
            .iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) == 0)
            .map(|(_, (crd, _))| *crd)
            .collect();
        let name = if installed.is_empty() {
            "none".to_string()
        } else {
            installed.join(" + ")
        };
        cases.push(start_case(name, &absent).await);
    }
    let churn = start_case(
        format!(
            "resize CRD applied/deleted every {} s (others absent)",
            churn_every.as_secs()
        ),
        &CRDS.map(|(crd, _)| crd),
    )
    .await;
    // Past start-up: the initial lists and the first 404s are not idle load.
    tokio::time::sleep(Duration::from_secs(10)).await;
    for case in cases.iter().chain([&churn]) {
        case.lone.server.audit().clear();
    }
    println!(
        "idle-api: {} agents (release build, refresh 2 s), no pods, window {} s",
        cases.len() + 1,
        window.as_secs()
    );
    let started = Instant::now();
    let mut installed = false;
    let mut flips = 0u32;
    while started.elapsed() < window {
        tokio::time::sleep(churn_every.min(window.saturating_sub(started.elapsed()))).await;
        if started.elapsed() >= window {
            break;
        }
        let crd = CRDS[1].0;
        let flipped = if installed {
            churn.lone.server.store().remove_crd(crd).map(|_| ())
        } else {
            churn.lone.server.store().install_crd(crd).map(|_| ())
        };
        flipped.expect("CRD churn");
        installed = !installed;
        flips += 1;
    }
    let seconds = started.elapsed().as_secs_f64();

    println!();
    println!("| CRDs installed | requests | per second | by verb |");
    println!("| --- | --- | --- | --- |");
    for case in cases.iter().chain([&churn]) {
        let entries = case.lone.server.audit().entries();
        let mut by_verb: BTreeMap<String, usize> = BTreeMap::new();
        for e in &entries {
            let key = if e.request.is_resource {
                format!("{} {} {}", e.request.verb, e.rbac_resource(), e.code)
            } else {
                format!("{} {} {}", e.request.verb, e.request.path, e.code)
            };
            *by_verb.entry(key).or_default() += 1;
        }
        let verbs: Vec<String> = by_verb.iter().map(|(k, n)| format!("{n}× {k}")).collect();
        println!(
            "| {} | {} | {:.4} | {} |",
            case.name,
            entries.len(),
            entries.len() as f64 / seconds,
            verbs.join(", ")
        );
    }
    println!();
    println!("churn: {flips} CRD changes in {seconds:.0} s");
    for case in cases.iter().chain([&churn]) {
        let log = case.lone.agent.log();
        let warnings = log.lines().filter(|l| l.contains(" WARN ")).count();
        println!("log of '{}': {warnings} warning lines", case.name);
    }
}
