//! What an idle agent costs the API server (issue 54): nothing but its watches, whether the
//! request kinds' CRDs are installed or not, and a CRD applied or deleted while it runs is
//! followed within seconds, with one warning when a kind is not served and one line when it is.
//! The agent binary runs against the API server double (which serves a custom resource only
//! while its CRD exists) and the real containerd.

mod support;

use std::time::Duration;

use apiserver_double::AuditEntry;
use serde_json::Value;
use support::agent::{LoneAgent, lone_agent};
use support::cluster_roles;

const KRUISE: &str = "containerrecreaterequests.apps.kruise.io";
const RESIZE: &str = "containerresizerequests.inplaced.io";
const RESTART: &str = "containerrestartrequests.inplaced.io";
const ROLLOUTS: &str = "containerrestartrollouts.inplaced.io";

/// How long the agent is watched at idle.
const IDLE_WINDOW: Duration = Duration::from_secs(60);

/// An agent on a node without pods, against a server without the CRDs of `absent`; returned
/// once it is ready and has opened its pods' and node's watches.
async fn idle_agent(absent: &[&str]) -> LoneAgent {
    let lone = lone_agent(absent, &[]).await;
    let server = &lone.server;
    // Settled: the pods' and the node's watches are open, and the request kinds had their
    // first answers.
    for resource in ["pods", "nodes"] {
        server
            .audit()
            .wait_for(Duration::from_secs(30), |e| {
                e.request.verb == "watch" && e.request.resource == resource
            })
            .await
            .unwrap_or_else(|| panic!("no watch of {resource}"));
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    lone
}

/// Every watch the agent keeps was opened: per request kind its own, or where its CRD is
/// absent the watch of that CRD by name.
fn assert_kept_watches(entries: &[AuditEntry], absent: &[&str]) {
    for crd in [KRUISE, RESIZE, RESTART, ROLLOUTS] {
        let plural = crd.split('.').next().unwrap_or_default();
        let watched = entries.iter().any(|e| {
            e.request.verb == "watch"
                && e.code == 200
                && if absent.contains(&crd) {
                    e.request.resource == "customresourcedefinitions" && e.request.name == crd
                } else {
                    e.request.resource == plural
                }
        });
        assert!(watched, "{crd}: {:#?}", describe(entries));
    }
}

fn describe(entries: &[AuditEntry]) -> Vec<String> {
    entries
        .iter()
        .map(|e| {
            format!(
                "{} {} {} {} ?{} -> {}",
                e.request.verb,
                e.request.api_group,
                e.rbac_resource(),
                e.request.name,
                e.query,
                e.code
            )
        })
        .collect()
}

/// Over [`IDLE_WINDOW`] the agent sends nothing but watch requests (the periodic re-open of
/// a watch; the kube-rs watcher asks for 290 s, so usually none at all in a minute).
async fn assert_only_watches_over_a_minute(idle: &LoneAgent, absent: &[&str]) {
    let settled = idle.server.audit().entries();
    idle.server.audit().clear();
    tokio::time::sleep(IDLE_WINDOW).await;
    // Everything: a 404 for a kind not served is audited as that kind's list.
    let entries: Vec<AuditEntry> = idle.server.audit().entries();
    let not_watches: Vec<&AuditEntry> = entries
        .iter()
        .filter(|e| e.request.verb != "watch")
        .collect();
    assert!(
        not_watches.is_empty(),
        "an idle agent sent more than its watches: {:#?}",
        describe(&entries)
    );
    assert!(
        entries.len() <= 5,
        "more watch re-opens than watches in a minute: {:#?}",
        describe(&entries)
    );
    let log = idle.agent.log();
    for kind in [
        "ContainerRecreateRequests",
        "ContainerResizeRequests",
        "ContainerRestartRequests",
    ] {
        let warnings = log
            .lines()
            .filter(|l| l.contains(&format!("does not serve {kind}")))
            .count();
        assert!(
            warnings <= 1,
            "{kind} not served said {warnings} times:\n{log}"
        );
    }
    assert_kept_watches(&settled, absent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn an_idle_agent_sends_only_its_watches_with_every_crd_installed() {
    let idle = idle_agent(&[]).await;
    assert_only_watches_over_a_minute(&idle, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn an_idle_agent_sends_only_its_watches_without_any_crd() {
    let idle = idle_agent(&[KRUISE, RESIZE, RESTART, ROLLOUTS]).await;
    assert_only_watches_over_a_minute(&idle, &[KRUISE, RESIZE, RESTART, ROLLOUTS]).await;
    let log = idle.agent.log();
    for kind in [
        "ContainerRecreateRequests",
        "ContainerResizeRequests",
        "ContainerRestartRequests",
        "ContainerRestartRollouts",
    ] {
        assert_eq!(
            log.lines()
                .filter(|l| l.contains(&format!("does not serve {kind}")))
                .count(),
            1,
            "said once:\n{log}"
        );
    }
}

/// A CRD applied while the agent runs is followed within seconds (its kind listed and
/// watched, "serves it now" said once); deleted again, the agent goes back to watching the
/// CRD (the warning said a second time), without a request loop in between. Every CRD request
/// is one the shipped roles grant (by resourceNames).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn a_crd_applied_and_deleted_while_the_agent_runs_is_followed_at_once() {
    let idle = idle_agent(&[KRUISE, RESIZE, RESTART]).await;
    let audit = idle.server.audit();
    audit
        .wait_for(Duration::from_secs(10), |e| {
            e.request.resource == "customresourcedefinitions" && e.request.name == RESIZE
        })
        .await
        .expect("the CRD is watched");
    idle.server.store().install_crd(RESIZE).expect("installed");
    let listed = audit
        .wait_for(Duration::from_secs(10), |e| {
            e.request.verb == "list"
                && e.request.resource == "containerresizerequests"
                && e.code == 200
        })
        .await;
    assert!(listed.is_some(), "{:#?}", describe(&audit.entries()));
    audit
        .wait_for(Duration::from_secs(10), |e| {
            e.request.verb == "watch" && e.request.resource == "containerresizerequests"
        })
        .await
        .expect("the kind is watched");

    idle.server.store().remove_crd(RESIZE).expect("removed");
    let before = audit.entries().len();
    let rewatched = audit
        .wait_for(Duration::from_secs(40), |e| {
            e.seq as usize > before
                && e.request.verb == "watch"
                && e.request.resource == "customresourcedefinitions"
                && e.request.name == RESIZE
        })
        .await;
    assert!(rewatched.is_some(), "{:#?}", describe(&audit.entries()));
    // No loop after it: a few seconds later, nothing more of the kind.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after: Vec<AuditEntry> = audit
        .entries()
        .into_iter()
        .filter(|e| e.seq as usize > before && e.request.resource == "containerresizerequests")
        .collect();
    assert!(after.len() <= 2, "{:#?}", describe(&after));

    let log = idle.agent.log();
    let count = |needle: &str| log.lines().filter(|l| l.contains(needle)).count();
    // Said again on deletion, unless within a minute of the first with the same words (the
    // agent writes a warning of one cause at most once a minute).
    let warned = count("does not serve ContainerResizeRequests");
    assert!((1..=2).contains(&warned), "{log}");
    assert_eq!(
        log.lines()
            .filter(|l| l.contains("serves it now") && l.contains("containerresizerequests"))
            .count(),
        1,
        "{log}"
    );

    for file in ["rbac-dedicated.yaml", "rbac-node-bound.yaml"] {
        let denied: Vec<AuditEntry> = audit
            .not_allowed_by(&Value::Array(cluster_roles(file)))
            .into_iter()
            .filter(|e| e.request.resource == "customresourcedefinitions")
            .collect();
        assert!(
            denied.is_empty(),
            "{file} does not grant: {:#?}",
            describe(&denied)
        );
    }
}
