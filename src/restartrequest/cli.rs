//! `inplaced restart` (also `kubectl inplaced restart`, through the `kubectl-inplaced` plugin):
//! restarts containers of one pod in place through a ContainerRestartRequest, or, with
//! `--selector`, of every matching pod through a ContainerRestartRollout, which the node agents
//! carry out and this command follows (`crate::rollout::cli`). Exit 0 when everything was
//! restarted, 1 when a request failed, 2 on bad arguments, 3 when it did not finish (or make
//! progress) within `--timeout`, 130 when interrupted.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use ::kube::api::{Api, DynamicObject, PostParams};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::object::{self, RestartPhase, RestartRequest};

#[derive(clap::Args, Debug)]
pub struct RestartArgs {
    /// The pod whose containers to restart (or --selector for many pods).
    #[arg(required_unless_present = "selector", conflicts_with = "selector")]
    pub pod: Option<String>,
    #[arg(short = 'n', long, default_value = "default")]
    pub namespace: String,
    /// A container to restart (repeat for several) [default: every app container].
    #[arg(short = 'c', long = "container")]
    pub containers: Vec<String>,
    /// Restart every pod with these labels, e.g. app=web (a label selector).
    #[arg(short = 'l', long)]
    pub selector: Option<String>,
    /// With --selector: how many matching pods may be unready at once, a number or a
    /// percentage of the matching pods (rounded down, at least 1) [default: 1].
    #[arg(long)]
    pub max_unavailable: Option<String>,
    /// Restart the containers one at a time, in the order given, each ready before the next.
    #[arg(long)]
    pub ordered: bool,
    /// How long a new container must run ready to count as restarted.
    #[arg(long, value_name = "SECONDS")]
    pub min_started_seconds: Option<i64>,
    /// The stop's grace period [default: the pod's terminationGracePeriodSeconds].
    #[arg(long, value_name = "SECONDS")]
    pub grace_period: Option<i64>,
    /// Follow the request until it finishes (a rollout is always followed).
    #[arg(long)]
    pub wait: bool,
    /// How long to wait for one request, or for a rollout to make progress, e.g. 2m.
    #[arg(long, default_value = "5m")]
    pub timeout: String,
    /// kubeconfig [default: $KUBECONFIG, then ~/.kube/config, then in-cluster]
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
}

pub(crate) const EXIT_FAILED: u8 = 1;
pub(crate) const EXIT_USAGE: u8 = 2;
pub(crate) const EXIT_TIMEOUT: u8 = 3;
pub(crate) const EXIT_INTERRUPTED: u8 = 130;

/// Why the arguments ask nothing (a usage error, exit 2), or why no request can be made for a
/// pod (exit 1).
#[derive(Debug, thiserror::Error)]
pub(crate) enum AskError {
    #[error("--max-unavailable goes with --selector")]
    MaxUnavailableWithoutSelector,
    #[error("--min-started-seconds must not be negative")]
    NegativeMinStartedSeconds { seconds: i64 },
    #[error("--grace-period must not be negative")]
    NegativeGracePeriod { seconds: i64 },
    /// Empty, or named before.
    #[error("-c {name:?}: name each container once")]
    ContainerNotNamedOnce { name: String },
    #[error("pod {pod} is not scheduled to a node yet")]
    Unscheduled { pod: String },
    #[error("{0}")]
    Object(#[source] serde_json::Error),
}

/// What every request of one command asks besides its pod.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Ask {
    pub containers: Vec<String>,
    pub strategy: Value,
}

impl Ask {
    pub(crate) fn from_args(args: &RestartArgs) -> Result<Ask, AskError> {
        if args.max_unavailable.is_some() && args.selector.is_none() {
            return Err(AskError::MaxUnavailableWithoutSelector);
        }
        let mut strategy = serde_json::Map::new();
        if args.ordered {
            strategy.insert("orderedRestart".into(), json!(true));
        }
        if let Some(seconds) = args.min_started_seconds {
            if seconds < 0 {
                return Err(AskError::NegativeMinStartedSeconds { seconds });
            }
            strategy.insert("minStartedSeconds".into(), json!(seconds));
        }
        if let Some(seconds) = args.grace_period {
            if seconds < 0 {
                return Err(AskError::NegativeGracePeriod { seconds });
            }
            strategy.insert("terminationGracePeriodSeconds".into(), json!(seconds));
        }
        let mut seen = std::collections::BTreeSet::new();
        for c in &args.containers {
            if c.is_empty() || !seen.insert(c) {
                return Err(AskError::ContainerNotNamedOnce { name: c.clone() });
            }
        }
        Ok(Ask {
            containers: args.containers.clone(),
            strategy: Value::Object(strategy),
        })
    }

    /// The request for `pod`, labelled with its node.
    pub fn request_for(&self, pod: &Pod) -> Result<DynamicObject, AskError> {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else {
            return Err(AskError::Unscheduled { pod: name });
        };
        let mut spec = json!({
            "podName": name,
            "podUID": pod.metadata.uid.clone().unwrap_or_default(),
        });
        if !self.containers.is_empty() {
            spec["containers"] = self.containers.iter().map(|c| json!({"name": c})).collect();
        }
        if self.strategy.as_object().is_some_and(|s| !s.is_empty()) {
            spec["strategy"] = self.strategy.clone();
        }
        serde_json::from_value(json!({
            "apiVersion": format!("{}/{}", object::GROUP, object::VERSION),
            "kind": object::KIND,
            "metadata": {
                "generateName": format!("{name}-restart-"),
                "namespace": namespace,
                "labels": { object::LABEL_NODE_NAME: node },
            },
            "spec": spec,
        }))
        .map_err(AskError::Object)
    }
}

pub async fn run(args: RestartArgs) -> anyhow::Result<ExitCode> {
    let usage = |message: String| {
        eprintln!("error: {message}");
        Ok(ExitCode::from(EXIT_USAGE))
    };
    let ask = match Ask::from_args(&args) {
        Ok(ask) => ask,
        Err(err) => return usage(err.to_string()),
    };
    let timeout = match humantime::parse_duration(&args.timeout) {
        Ok(timeout) => timeout,
        Err(err) => return usage(format!("--timeout {:?}: {err}", args.timeout)),
    };
    let client = crate::kube::command_client(args.kubeconfig.as_deref()).await?;
    let requests: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &args.namespace,
        &super::restart_request_resource(),
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), &args.namespace);
    if args.selector.is_some() {
        // `main` hands a selector to `crate::rollout::cli::restart_selector`.
        return usage("--selector makes a rollout: inplaced rollout".into());
    }
    let Some(pod_name) = &args.pod else {
        return usage("name a pod or --selector".into());
    };
    let pod = pods.get(pod_name).await?;
    let object = match ask.request_for(&pod) {
        Ok(object) => object,
        Err(err) => {
            eprintln!("error: {err}");
            return Ok(ExitCode::from(EXIT_FAILED));
        }
    };
    let created = requests.create(&PostParams::default(), &object).await?;
    let name = created.metadata.name.clone().unwrap_or_default();
    println!("containerrestartrequest/{name} created for pod {pod_name}");
    if !args.wait {
        return Ok(ExitCode::SUCCESS);
    }
    let mut shown = Shown::default();
    let follow = async {
        loop {
            let object = requests.get(&name).await?;
            let request = RestartRequest::from_object(&object).map_err(anyhow::Error::msg)?;
            shown.print(&request);
            if request.status.phase.is_final() {
                return anyhow::Ok(request.status.phase);
            }
            tokio::time::sleep(POLL).await;
        }
    };
    tokio::select! {
        phase = tokio::time::timeout(timeout, follow) => match phase {
            Ok(Ok(RestartPhase::Succeeded)) => Ok(ExitCode::SUCCESS),
            Ok(Ok(_)) => Ok(ExitCode::from(EXIT_FAILED)),
            Ok(Err(err)) => Err(err),
            Err(_) => {
                eprintln!("{name}: not finished after {}", humantime::format_duration(timeout));
                Ok(ExitCode::from(EXIT_TIMEOUT))
            }
        },
        _ = tokio::signal::ctrl_c() => {
            eprintln!("interrupted: {name} stays and the agent finishes it (kubectl get containerrestartrequest {name} -n {})", args.namespace);
            Ok(ExitCode::from(EXIT_INTERRUPTED))
        }
    }
}

/// How often a followed request is read again.
pub(crate) const POLL: Duration = Duration::from_millis(500);

/// Prints what changed in followed requests: the phase, the message, each container's state.
#[derive(Default)]
pub(crate) struct Shown(std::collections::HashMap<String, Vec<String>>);

impl Shown {
    pub fn print(&mut self, request: &RestartRequest) {
        let lines = describe(request);
        let last = self.0.entry(request.name.clone()).or_default();
        for line in &lines {
            if !last.contains(line) {
                println!("{}: {line}", request.name);
            }
        }
        *last = lines;
    }
}

/// The status as lines: the phase (and message), then one per container.
pub(super) fn describe(request: &RestartRequest) -> Vec<String> {
    let status = &request.status;
    if status.phase == RestartPhase::None {
        return Vec::new();
    }
    let mut lines = vec![format!(
        "{}{}",
        status.phase.as_str(),
        status
            .message
            .as_deref()
            .map(|m| format!(": {m}"))
            .unwrap_or_default()
    )];
    for c in &status.containers {
        lines.push(format!(
            "  {} {:?}{}",
            c.name,
            c.phase,
            c.message
                .as_deref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: RestartArgs,
    }

    fn args(argv: &[&str]) -> Result<RestartArgs, clap::Error> {
        let mut all = vec!["restart"];
        all.extend_from_slice(argv);
        Cli::try_parse_from(all).map(|c| c.args)
    }

    #[test]
    fn a_pod_or_a_selector_but_not_both() {
        assert!(args(&[]).is_err());
        assert!(args(&["web", "-l", "app=web"]).is_err());
        let one_pod = args(&["web", "--max-unavailable", "2"]).unwrap();
        assert!(Ask::from_args(&one_pod).is_err());
        let parsed = args(&["-l", "app=web", "--max-unavailable", "25%"]);
        assert!(parsed.is_ok(), "{:?}", parsed.err());
    }

    #[test]
    fn the_request_names_pod_uid_node_and_strategy() {
        let a = args(&[
            "web",
            "-c",
            "app",
            "-c",
            "side",
            "--ordered",
            "--grace-period",
            "3",
        ])
        .unwrap();
        let ask = Ask::from_args(&a).unwrap();
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "u1"},
            "spec": {"nodeName": "n1", "containers": []}}))
        .unwrap();
        let object = serde_json::to_value(ask.request_for(&pod).unwrap()).unwrap();
        assert_eq!(object["metadata"]["labels"][object::LABEL_NODE_NAME], "n1");
        assert_eq!(
            object["spec"],
            json!({"podName": "web", "podUID": "u1",
                   "containers": [{"name": "app"}, {"name": "side"}],
                   "strategy": {"orderedRestart": true, "terminationGracePeriodSeconds": 3}})
        );
        let unscheduled: Pod =
            serde_json::from_value(json!({"metadata": {"name": "web"}})).unwrap();
        assert!(
            ask.request_for(&unscheduled)
                .unwrap_err()
                .to_string()
                .contains("not scheduled")
        );
        let twice = args(&["web", "-c", "app", "-c", "app"]).unwrap();
        assert!(Ask::from_args(&twice).is_err());
        let negative = args(&["web", "--grace-period=-1"]).unwrap();
        assert!(Ask::from_args(&negative).is_err());
    }
}
