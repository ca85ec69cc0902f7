//! The rollout from a terminal: `inplaced restart -l …` makes a ContainerRestartRollout and
//! follows it; `inplaced rollout status|pause|resume|cancel NAME` (also through `kubectl
//! inplaced`). Following is only reading: the agents carry the rollout out whether anyone
//! follows it or not, so Ctrl-C detaches and the rollout goes on. Exit codes as `inplaced
//! restart`: 0 done, 1 failed, 2 bad arguments, 3 no progress within `--timeout`, 130 detached.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use ::kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::json;

use super::object::{self, LABEL_ROLLOUT, RolloutPhase, RolloutSpec, RolloutStatus};
use super::rollout_resource;
use crate::restartrequest::cli::{
    Ask, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_TIMEOUT, EXIT_USAGE, POLL, RestartArgs, Shown,
};
use crate::restartrequest::object::RestartRequest;
use crate::restartrequest::restart_request_resource;

#[derive(clap::Args, Debug)]
pub struct RolloutArgs {
    #[command(subcommand)]
    pub action: RolloutAction,
    #[arg(short = 'n', long, default_value = "default", global = true)]
    pub namespace: String,
    /// kubeconfig [default: $KUBECONFIG, then ~/.kube/config, then in-cluster]
    #[arg(long, env = "KUBECONFIG", global = true)]
    pub kubeconfig: Option<PathBuf>,
}

#[derive(clap::Subcommand, Debug)]
pub enum RolloutAction {
    /// Follow a rollout until it ends (Ctrl-C detaches; the rollout goes on).
    Status {
        name: String,
        /// How long it may go without progress, e.g. 10m.
        #[arg(long, default_value = "5m")]
        timeout: String,
    },
    /// Restart no further pod (those under way finish).
    Pause { name: String },
    /// Go on after a pause.
    Resume { name: String },
    /// Delete the rollout: no further pod is restarted (those under way finish).
    Cancel { name: String },
}

pub async fn run(args: RolloutArgs) -> anyhow::Result<ExitCode> {
    let client = crate::kube::command_client(args.kubeconfig.as_deref()).await?;
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &args.namespace, &rollout_resource());
    let code = match args.action {
        RolloutAction::Status { name, timeout } => {
            let timeout = match humantime::parse_duration(&timeout) {
                Ok(timeout) => timeout,
                Err(err) => {
                    eprintln!("error: --timeout {timeout:?}: {err}");
                    return Ok(ExitCode::from(EXIT_USAGE));
                }
            };
            follow(&client, &args.namespace, &name, timeout).await?
        }
        RolloutAction::Pause { ref name } | RolloutAction::Resume { ref name } => {
            let pause = matches!(args.action, RolloutAction::Pause { .. });
            api.patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"paused": pause}})),
            )
            .await?;
            println!(
                "containerrestartrollout/{name} {}",
                if pause { "paused" } else { "resumed" }
            );
            0
        }
        RolloutAction::Cancel { name } => {
            api.delete(&name, &DeleteParams::default()).await?;
            println!(
                "containerrestartrollout/{name} deleted: no further pod is restarted; restarts under way finish"
            );
            0
        }
    };
    Ok(ExitCode::from(code))
}

/// `inplaced restart --selector …`: a rollout of every matching pod, followed.
pub async fn restart_selector(args: RestartArgs) -> anyhow::Result<ExitCode> {
    let usage = |message: String| {
        eprintln!("error: {message}");
        Ok(ExitCode::from(EXIT_USAGE))
    };
    let Some(selector) = args.selector.as_deref() else {
        return usage("no --selector".into());
    };
    let ask = match Ask::from_args(&args) {
        Ok(ask) => ask,
        Err(err) => return usage(err.to_string()),
    };
    let spec = match spec_of(&ask, selector, args.max_unavailable.as_deref()) {
        Ok(spec) => spec,
        Err(err) => return usage(err.to_string()),
    };
    let timeout = match humantime::parse_duration(&args.timeout) {
        Ok(timeout) => timeout,
        Err(err) => return usage(format!("--timeout {:?}: {err}", args.timeout)),
    };
    let client = crate::kube::command_client(args.kubeconfig.as_deref()).await?;
    let code = create_and_follow(&client, &args.namespace, selector, spec, timeout).await?;
    Ok(ExitCode::from(code))
}

/// Why the command's arguments make no rollout spec: a usage error (exit 2).
#[derive(Debug, thiserror::Error)]
enum SpecError {
    #[error("{0}")]
    Strategy(#[source] serde_json::Error),
    #[error("--selector {0}")]
    Selector(#[source] SelectorError),
    /// The spec's own check refused it; its words name the spec's fields, and the flag is named
    /// instead where there is one.
    #[error("{}", .reason.replace("spec.maxUnavailable", "--max-unavailable"))]
    Invalid { reason: String },
}

/// The rollout of every pod of `selector` (kubectl's syntax) that `ask` describes.
fn spec_of(
    ask: &Ask,
    selector: &str,
    max_unavailable: Option<&str>,
) -> Result<RolloutSpec, SpecError> {
    let max_unavailable = max_unavailable.map(|text| match text.parse::<i32>() {
        Ok(count) => IntOrString::Int(count),
        Err(_) => IntOrString::String(text.to_string()),
    });
    let strategy = serde_json::from_value(ask.strategy.clone()).map_err(SpecError::Strategy)?;
    RolloutSpec {
        selector: parse_selector(selector).map_err(SpecError::Selector)?,
        containers: ask.containers.clone(),
        max_unavailable,
        strategy: Some(strategy),
        ..Default::default()
    }
    .validate()
    // `validate` words its reasons itself (a String shared with the agents' check).
    .map_err(|reason| SpecError::Invalid { reason })
}

/// Makes a rollout of `spec` (after checking that some pod matches) and follows it.
async fn create_and_follow(
    client: &::kube::Client,
    namespace: &str,
    selector_text: &str,
    spec: RolloutSpec,
    timeout: Duration,
) -> anyhow::Result<u8> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let matching = pods
        .list(&ListParams::default().labels(selector_text))
        .await?;
    if matching.items.is_empty() {
        eprintln!("no pod of namespace {namespace} matches {selector_text:?}: nothing to restart");
        return Ok(EXIT_FAILED);
    }
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &rollout_resource());
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{}/{}", object::GROUP, object::VERSION),
        "kind": object::KIND,
        "metadata": {"generateName": "restart-", "namespace": namespace},
        "spec": spec,
    }))?;
    let created = match api.create(&PostParams::default(), &object).await {
        Ok(created) => created,
        Err(::kube::Error::Api(status)) if status.code == 404 => {
            eprintln!(
                "error: the cluster does not serve ContainerRestartRollouts: apply packaging/kubernetes/crd-containerrestartrollouts.yaml"
            );
            return Ok(EXIT_FAILED);
        }
        Err(err) => return Err(err.into()),
    };
    let name = created.metadata.name.unwrap_or_default();
    println!(
        "containerrestartrollout/{name} created: {} pods match; the node agents restart them",
        matching.items.len()
    );
    follow(client, namespace, &name, timeout).await
}

/// Prints the rollout's progress until it ends, makes no progress for `timeout`, or Ctrl-C.
async fn follow(
    client: &::kube::Client,
    namespace: &str,
    name: &str,
    timeout: Duration,
) -> anyhow::Result<u8> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &rollout_resource());
    let requests: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &restart_request_resource());
    let again = format!("follow it again with: inplaced rollout status {name} -n {namespace}");
    let mut shown = Progress::default();
    let mut requests_shown = Shown::default();
    let mut last_progress = Instant::now();
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    loop {
        let object = match api.get_opt(name).await? {
            Some(object) => object,
            None => {
                eprintln!("containerrestartrollout/{name} is gone (deleted)");
                return Ok(EXIT_FAILED);
            }
        };
        let rollout = object::decode(&object).map_err(anyhow::Error::msg)?;
        if shown.print(name, &rollout.status) {
            last_progress = Instant::now();
        }
        // The pods' restarts as their requests tell them (the kubelet's back-off included).
        let labelled = ListParams::default().labels(&format!("{LABEL_ROLLOUT}={name}"));
        if let Ok(list) = requests.list(&labelled).await {
            for object in &list.items {
                if let Ok(request) = RestartRequest::from_object(object) {
                    requests_shown.print(&request);
                }
            }
        }
        let status = &rollout.status;
        match status.phase {
            RolloutPhase::Succeeded => {
                println!(
                    "{} of {} pods restarted in place",
                    status.done, status.matched
                );
                return Ok(0);
            }
            RolloutPhase::Failed => {
                eprintln!(
                    "rollout failed: {}",
                    status.message.as_deref().unwrap_or("see its status")
                );
                eprintln!("{} of {} pods restarted", status.done, status.matched);
                return Ok(EXIT_FAILED);
            }
            _ => {}
        }
        if last_progress.elapsed() > timeout {
            let mut why: Vec<String> = status
                .nodes
                .iter()
                .filter_map(|p| p.waiting.as_ref().map(|w| format!("node {}: {w}", p.node)))
                .collect();
            why.extend(status.message.clone());
            if why.is_empty() {
                why.push("the pods under way did not finish".into());
            }
            eprintln!(
                "no progress for {}: {}; the rollout goes on; {again}",
                humantime::format_duration(timeout),
                why.join("; ")
            );
            return Ok(EXIT_TIMEOUT);
        }
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            _ = &mut interrupted => {
                eprintln!("detached: containerrestartrollout/{name} goes on without this terminal; {again}");
                return Ok(EXIT_INTERRUPTED);
            }
        }
    }
}

/// What was printed of a rollout, so that only changes are printed.
#[derive(Default)]
struct Progress {
    summary: Option<String>,
    claims: BTreeSet<(String, String)>,
    failures: BTreeSet<String>,
    message: Option<String>,
    waiting: BTreeMap<String, String>,
}

impl Progress {
    /// Prints what changed; true when the rollout progressed (a pod started or finished).
    fn print(&mut self, name: &str, status: &RolloutStatus) -> bool {
        let mut progressed = false;
        let summary = format!(
            "{}: {} of {} restarted, {} under way, {} failed{}",
            match status.phase {
                RolloutPhase::None => "Pending",
                RolloutPhase::Progressing => "Progressing",
                RolloutPhase::Paused => "Paused",
                RolloutPhase::Succeeded => "Succeeded",
                RolloutPhase::Failed => "Failed",
            },
            status.done,
            status.matched,
            status.in_progress,
            status.failed,
            if status.not_included > 0 {
                format!(
                    " ({} matching pods created since the start are not restarted)",
                    status.not_included
                )
            } else {
                String::new()
            }
        );
        if self.summary.as_ref() != Some(&summary) {
            println!("rollout/{name}: {summary}");
            progressed = self.summary.is_some();
            self.summary = Some(summary);
        }
        let claims: BTreeSet<(String, String)> = status
            .claims()
            .map(|(node, c)| (c.pod.clone(), node.to_string()))
            .collect();
        for (pod, node) in claims.difference(&self.claims) {
            println!("pod/{pod}: restarting (node {node})");
            progressed = true;
        }
        self.claims = claims;
        for failure in status.nodes.iter().flat_map(|p| &p.failures) {
            if self.failures.insert(failure.pod_uid.clone()) {
                eprintln!("pod/{}: not restarted: {}", failure.pod, failure.message);
            }
        }
        let waiting: BTreeMap<String, String> = status
            .nodes
            .iter()
            .filter_map(|p| p.waiting.clone().map(|w| (p.node.clone(), w)))
            .collect();
        for (node, reason) in &waiting {
            if self.waiting.get(node) != Some(reason) {
                println!("node {node}: waiting: {reason}");
            }
        }
        self.waiting = waiting;
        if status.message != self.message {
            if let Some(message) = &status.message
                && !status.phase.is_final()
            {
                println!("rollout/{name}: {message}");
            }
            self.message = status.message.clone();
        }
        progressed
    }
}

/// Why a `kubectl -l` label selector cannot be read; `text` is the whole selector.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SelectorError {
    #[error("{text:?}: cannot read {term:?} as a label selector term")]
    BadTerm { text: String, term: String },
    #[error("{text:?}: unbalanced parentheses")]
    UnbalancedParentheses { text: String },
    /// Read, but not a selector the API accepts: the API's rule as `check_selector` words it.
    #[error("{text:?}: {reason}")]
    Refused { text: String, reason: String },
}

/// A label selector as `kubectl -l` takes it: `k=v`, `k==v`, `k!=v`, `k in (a,b)`,
/// `k notin (a,b)`, `k`, `!k`, joined by commas.
pub(crate) fn parse_selector(text: &str) -> Result<LabelSelector, SelectorError> {
    let mut labels = BTreeMap::new();
    let mut expressions = Vec::new();
    let requirement =
        |key: &str, operator: &str, values: Option<Vec<String>>| LabelSelectorRequirement {
            key: key.trim().to_string(),
            operator: operator.to_string(),
            values,
        };
    for term in split_terms(text)? {
        let term = term.trim();
        let bad = || SelectorError::BadTerm {
            text: text.to_string(),
            term: term.to_string(),
        };
        if term.is_empty() {
            return Err(bad());
        }
        let set = |rest: &str| -> Result<Vec<String>, SelectorError> {
            let inner = rest
                .trim()
                .strip_prefix('(')
                .and_then(|r| r.strip_suffix(')'))
                .ok_or_else(bad)?;
            let values: Vec<String> = inner.split(',').map(|v| v.trim().to_string()).collect();
            if values.iter().any(String::is_empty) {
                return Err(bad());
            }
            Ok(values)
        };
        if let Some((key, values)) = term.split_once(" notin ") {
            expressions.push(requirement(key, "NotIn", Some(set(values)?)));
        } else if let Some((key, values)) = term.split_once(" in ") {
            expressions.push(requirement(key, "In", Some(set(values)?)));
        } else if let Some((key, value)) = term.split_once("!=") {
            expressions.push(requirement(
                key,
                "NotIn",
                Some(vec![value.trim().to_string()]),
            ));
        } else if let Some((key, value)) = term.split_once("==").or_else(|| term.split_once('=')) {
            labels.insert(key.trim().to_string(), value.trim().to_string());
        } else if let Some(key) = term.strip_prefix('!') {
            expressions.push(requirement(key, "DoesNotExist", None));
        } else {
            expressions.push(requirement(term, "Exists", None));
        }
    }
    let selector = LabelSelector {
        match_labels: (!labels.is_empty()).then_some(labels),
        match_expressions: (!expressions.is_empty()).then_some(expressions),
    };
    object::check_selector(&selector).map_err(|reason| SelectorError::Refused {
        text: text.to_string(),
        reason,
    })?;
    Ok(selector)
}

/// Splits at commas outside parentheses.
fn split_terms(text: &str) -> Result<Vec<&str>, SelectorError> {
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                terms.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if depth < 0 {
            return Err(SelectorError::UnbalancedParentheses {
                text: text.to_string(),
            });
        }
    }
    if depth != 0 {
        return Err(SelectorError::UnbalancedParentheses {
            text: text.to_string(),
        });
    }
    terms.push(&text[start..]);
    Ok(terms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::kube::core::{Selector, SelectorExt};
    use clap::Parser;
    use serde_json::json;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: RestartArgs,
    }

    fn restart_args(argv: &[&str]) -> RestartArgs {
        let mut all = vec!["restart"];
        all.extend_from_slice(argv);
        Cli::try_parse_from(all).unwrap().args
    }

    #[test]
    fn a_selector_makes_a_rollout_spec_and_bad_ones_are_usage_errors() {
        let a = restart_args(&[
            "-l",
            "app=web,tier in (a,b)",
            "--max-unavailable",
            "25%",
            "-c",
            "app",
            "--ordered",
        ]);
        let ask = Ask::from_args(&a).unwrap();
        let spec = spec_of(&ask, "app=web,tier in (a,b)", Some("25%")).unwrap();
        assert_eq!(
            serde_json::to_value(&spec).unwrap(),
            json!({"selector": {"matchLabels": {"app": "web"},
                                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]},
                   "containers": ["app"], "maxUnavailable": "25%",
                   "strategy": {"orderedRestart": true, "minStartedSeconds": 0}, "paused": false})
        );
        let ask = Ask::from_args(&restart_args(&["-l", "app=web"])).unwrap();
        assert_eq!(
            spec_of(&ask, "app=web", Some("3")).unwrap().max_unavailable,
            Some(IntOrString::Int(3))
        );
        assert_eq!(
            spec_of(&ask, "app=web", Some("0")).unwrap_err().to_string(),
            "--max-unavailable 0: must be at least 1"
        );
        assert_eq!(
            spec_of(&ask, "app in web", None).unwrap_err().to_string(),
            "--selector \"app in web\": cannot read \"app in web\" as a label selector term"
        );
        assert_eq!(
            parse_selector("app in (a").unwrap_err().to_string(),
            "\"app in (a\": unbalanced parentheses"
        );
        for (selector, max, said) in [
            ("app=web", Some("0"), "--max-unavailable 0"),
            ("app=web", Some("x"), "--max-unavailable \"x\""),
            ("app in web", None, "--selector"),
        ] {
            let err = spec_of(&ask, selector, max).unwrap_err().to_string();
            assert!(err.starts_with(said), "{err}");
        }
    }

    fn matches(selector: &str, labels: &[(&str, &str)]) -> bool {
        let parsed = Selector::try_from(parse_selector(selector).unwrap()).unwrap();
        let labels: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        parsed.matches(&labels)
    }

    #[test]
    fn selectors_read_as_kubectl_reads_them() {
        assert!(matches("app=web", &[("app", "web")]));
        assert!(matches("app==web,tier", &[("app", "web"), ("tier", "x")]));
        assert!(!matches("app=web,tier", &[("app", "web")]));
        assert!(matches("app in (web, api),!canary", &[("app", "api")]));
        assert!(!matches(
            "app in (web,api),!canary",
            &[("app", "api"), ("canary", "1")]
        ));
        assert!(matches(
            "app notin (db),env!=prod",
            &[("app", "web"), ("env", "dev")]
        ));
        assert!(!matches("env!=prod", &[("env", "prod")]));
        for bad in [
            "",
            "app in web",
            "app in (web",
            "app=web,,x",
            "app in ()",
            "a b=c",
        ] {
            assert!(parse_selector(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn progress_prints_changes_and_counts_a_start_or_an_end_as_progress() {
        let mut progress = Progress::default();
        let mut status = RolloutStatus {
            phase: RolloutPhase::Progressing,
            matched: 2,
            ..Default::default()
        };
        assert!(
            !progress.print("r", &status),
            "the first look is not progress"
        );
        assert!(!progress.print("r", &status));
        status.nodes.push(object::NodePart {
            node: "n1".into(),
            claims: vec![object::Claim {
                pod: "p".into(),
                pod_uid: "u".into(),
                since: "2026-11-29T08:00:00Z".into(),
            }],
            ..Default::default()
        });
        assert!(progress.print("r", &status), "a pod started");
        status.nodes[0].claims.clear();
        status.done = 1;
        assert!(progress.print("r", &status), "a pod finished");
    }
}
