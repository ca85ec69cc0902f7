//! `inplaced resize`: creates a ContainerResizeRequest for one container of a pod and follows it
//! to its final phase, printing each change. Exit 0 when it succeeded, 1 when it did not, 2 on
//! bad arguments, 3 when it did not finish within `--timeout`.

use std::path::PathBuf;
use std::process::ExitCode;

use ::kube::api::{Api, DynamicObject, PostParams};
use ::kube::runtime::watcher;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Map, Value, json};

use super::object::{self, ResizePhase, ResizeRequest};
use crate::resources::{ResourceError, Resources};

#[derive(clap::Args, Debug)]
pub struct ResizeArgs {
    /// The pod whose container to resize.
    pub pod: String,
    #[arg(short = 'n', long, default_value = "default")]
    pub namespace: String,
    /// The container to resize.
    #[arg(short = 'c', long)]
    pub container: String,
    /// New cpu request, e.g. 250m.
    #[arg(long)]
    pub cpu_request: Option<String>,
    /// New cpu limit, e.g. 1.
    #[arg(long)]
    pub cpu_limit: Option<String>,
    /// New memory request, e.g. 128Mi.
    #[arg(long)]
    pub memory_request: Option<String>,
    /// New memory limit, e.g. 256Mi.
    #[arg(long)]
    pub memory_limit: Option<String>,
    /// How long to follow the request, e.g. 2m.
    #[arg(long, default_value = "5m")]
    pub timeout: String,
    /// Create the request and print its name without following it.
    #[arg(long)]
    pub no_wait: bool,
    /// kubeconfig [default: $KUBECONFIG, then ~/.kube/config, then in-cluster]
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
}

const EXIT_FAILED: u8 = 1;
const EXIT_USAGE: u8 = 2;
const EXIT_TIMEOUT: u8 = 3;

/// Why the flags ask for no resize the agent would accept: a usage error (exit 2).
#[derive(Debug, thiserror::Error)]
enum ResizeArgsError {
    #[error("name at least one of --cpu-request, --cpu-limit, --memory-request, --memory-limit")]
    NoResourceNamed,
    #[error("{0}")]
    Resources(#[source] ResourceError),
}

/// The `resources` of the request's container, checked like the agent will check it.
fn requirements(args: &ResizeArgs) -> Result<Value, ResizeArgsError> {
    let list = |cpu: &Option<String>, memory: &Option<String>| {
        let mut list = Map::new();
        for (key, value) in [("cpu", cpu), ("memory", memory)] {
            if let Some(value) = value {
                list.insert(key.into(), Value::String(value.clone()));
            }
        }
        list
    };
    let requests = list(&args.cpu_request, &args.memory_request);
    let limits = list(&args.cpu_limit, &args.memory_limit);
    if requests.is_empty() && limits.is_empty() {
        return Err(ResizeArgsError::NoResourceNamed);
    }
    let mut resources = Map::new();
    if !requests.is_empty() {
        resources.insert("requests".into(), Value::Object(requests));
    }
    if !limits.is_empty() {
        resources.insert("limits".into(), Value::Object(limits));
    }
    let resources = Value::Object(resources);
    Resources::from_requirements(&resources).map_err(ResizeArgsError::Resources)?;
    Ok(resources)
}

pub async fn run(args: ResizeArgs) -> anyhow::Result<ExitCode> {
    let resources = match requirements(&args) {
        Ok(resources) => resources,
        Err(err) => {
            eprintln!("error: {err}");
            return Ok(ExitCode::from(EXIT_USAGE));
        }
    };
    let timeout = match humantime::parse_duration(&args.timeout) {
        Ok(timeout) => timeout,
        Err(err) => {
            eprintln!("error: --timeout {:?}: {err}", args.timeout);
            return Ok(ExitCode::from(EXIT_USAGE));
        }
    };
    let client = crate::kube::command_client(args.kubeconfig.as_deref()).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &args.namespace);
    let pod = pods.get(&args.pod).await?;
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .ok_or_else(|| anyhow::anyhow!("pod {} is not scheduled to a node yet", args.pod))?;
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{}/{}", object::GROUP, object::VERSION),
        "kind": object::KIND,
        "metadata": {
            "generateName": format!("{}-", args.pod),
            "namespace": args.namespace,
            "labels": { object::LABEL_NODE_NAME: node },
        },
        "spec": {
            "podName": args.pod,
            "podUID": uid,
            "containers": [{"name": args.container, "resources": resources}],
        },
    }))?;
    let api: Api<DynamicObject> =
        Api::namespaced_with(client, &args.namespace, &super::resize_resource());
    let created = api.create(&PostParams::default(), &object).await?;
    let name = created.metadata.name.clone().unwrap_or_default();
    println!("containerresizerequest/{name} created (node {node})");
    if args.no_wait {
        return Ok(ExitCode::SUCCESS);
    }
    match tokio::time::timeout(timeout, follow(&api, &name)).await {
        Ok(Ok(ResizePhase::Succeeded)) => Ok(ExitCode::SUCCESS),
        Ok(Ok(_)) => Ok(ExitCode::from(EXIT_FAILED)),
        Ok(Err(err)) => Err(err),
        Err(_) => {
            eprintln!(
                "{name}: not finished after {}",
                humantime::format_duration(timeout)
            );
            Ok(ExitCode::from(EXIT_TIMEOUT))
        }
    }
}

/// Prints each new phase/message until a final phase; returns it.
async fn follow(api: &Api<DynamicObject>, name: &str) -> anyhow::Result<ResizePhase> {
    let mut events = std::pin::pin!(watcher::watch_object(api.clone(), name));
    let mut last = None;
    while let Some(event) = events.next().await {
        let Some(object) = event? else {
            anyhow::bail!("{name} was deleted before it finished");
        };
        let request = ResizeRequest::from_object(&object).map_err(|e| anyhow::anyhow!(e))?;
        let status = &request.status;
        let line = format!(
            "{}{}{}",
            status.phase.as_str(),
            status
                .actuator
                .map(|a| format!(" ({})", a.as_str()))
                .unwrap_or_default(),
            status
                .message
                .as_deref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        );
        if status.phase != ResizePhase::None && last.as_ref() != Some(&line) {
            println!("{name}: {line}");
            last = Some(line);
        }
        if status.phase.is_final() {
            for c in &status.containers {
                let applied = c
                    .resources
                    .as_ref()
                    .map(Value::to_string)
                    .unwrap_or_default();
                println!("  {}: {:?} {applied}", c.name, c.phase);
            }
            return Ok(status.phase);
        }
    }
    anyhow::bail!("the watch of {name} ended")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ResizeArgs,
    }

    fn args(extra: &[&str]) -> ResizeArgs {
        let mut argv = vec!["resize", "web", "-c", "main"];
        argv.extend_from_slice(extra);
        Cli::parse_from(argv).args
    }

    #[test]
    fn requirements_from_flags() {
        let value =
            requirements(&args(&["--cpu-limit", "1", "--memory-request", "64Mi"])).expect("valid");
        assert_eq!(
            value,
            json!({"requests": {"memory": "64Mi"}, "limits": {"cpu": "1"}})
        );
        assert!(requirements(&args(&[])).is_err_and(|e| e.to_string().contains("at least one")));
        assert!(requirements(&args(&["--cpu-limit", "fast"])).is_err());
    }
}
