//! The inplaced binary: wires the library's modules to a command line.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use inplaced::admin::{self, AdminError, AdminRequest};
use inplaced::checkpoints;
use inplaced::config::{Config, LogFormat, Settings};
use inplaced::cri::{CriClient, CriConfig, CriEndpoint};
use inplaced::hashing::KubeletVersion;
use inplaced::nodeview::{self, NodeView, UpgradeReport};
use inplaced::resize::through_kubelet;
use inplaced::upgrade::fleet::{self, FleetOutput};
use inplaced::{agent, inspect};

#[derive(Parser)]
#[command(
    name = "inplaced",
    version,
    about = "In-place container restarts and resizes beside the kubelet"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the node agent (what the systemd unit starts).
    Agent(AgentArgs),
    /// This node's pods joined with their runtime containers: a pod-aware `crictl ps`.
    Pods(PodsArgs),
    /// For every running container: would kubelet --to X.Y restart it because its stored hash
    /// no longer matches? (The kubelet 1.30 -> 1.31 surprise, kubernetes issue 129385.)
    UpgradeCheck(UpgradeCheckArgs),
    /// Ask the container runtime who it is (CRI Version) and whether it speaks CRI v1.
    Runtime(RuntimeArgs),
    /// Kubelet container hashes (io.kubernetes.container.hash) for any release.
    Hash(inplaced::hashing::cli::HashArgs),
    /// Resize a container's cpu/memory in place: creates a ContainerResizeRequest and follows it
    /// to the end (exit 0 succeeded, 1 not, 2 bad arguments, 3 timed out).
    Resize(inplaced::resize::cli::ResizeArgs),
    /// Restart containers in place, without OpenKruise: one pod (a ContainerRestartRequest), or
    /// every pod of a selector batch by batch (exit 0 done, 1 failed, 2 bad arguments, 3 timed
    /// out, 130 interrupted).
    Restart(inplaced::restartrequest::cli::RestartArgs),
    /// Follow, pause, resume or cancel a ContainerRestartRollout (`inplaced restart -l` makes
    /// one; the node agents carry it out).
    Rollout(inplaced::rollout::cli::RolloutArgs),
}

#[derive(clap::Args)]
struct AgentArgs {
    /// Config file (TOML, keys named like the flags) [default: /etc/inplaced/config.toml when present]
    #[arg(long, env = "INPLACED_CONFIG")]
    config: Option<PathBuf>,
    #[command(flatten)]
    settings: Settings,
    /// Print the configuration in force (after flags, environment, file and defaults) and exit.
    #[arg(long)]
    print_config: bool,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Output {
    Table,
    /// The table with more columns (`upgrade-check --fleet`: the workloads restarted).
    Wide,
    Json,
}

#[derive(clap::Args)]
struct PodsArgs {
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    output: Output,
    #[command(flatten)]
    agent: AgentArgs,
}

#[derive(clap::Args)]
struct UpgradeCheckArgs {
    /// The kubelet release to check against, X.Y or X.Y.Z.
    #[arg(long)]
    to: String,
    /// Every node's answer, from the NodeUpgradeChecks the agents write (a workstation's
    /// kubeconfig), instead of this node's.
    #[arg(long)]
    fleet: bool,
    /// With --fleet: only the nodes matching this label selector (implies --fleet).
    #[arg(long, value_name = "SELECTOR")]
    nodes: Option<String>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    output: Output,
    #[command(flatten)]
    agent: AgentArgs,
}

#[derive(clap::Args)]
struct RuntimeArgs {
    /// CRI socket (unix:///path or /path); discovered in kruise-daemon's order when not given.
    #[arg(long, env = "INPLACED_CRI_ENDPOINT")]
    cri_endpoint: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// Exit code for configuration errors, like clap's usage errors.
const EXIT_CONFIG: u8 = 2;

/// The name kubectl runs the plugin by (`kubectl inplaced …` runs `kubectl-inplaced …`): krew's
/// link to this binary, or the packages' launcher, which runs it under that name.
const KUBECTL_PLUGIN: &str = "kubectl-inplaced";

/// Whether the binary was started as the kubectl plugin (by its name, argv[0]).
fn started_as_plugin(args: &[OsString]) -> bool {
    args.first()
        .and_then(|zero| Path::new(zero).file_name())
        .is_some_and(|name| name == KUBECTL_PLUGIN)
}

/// The command line as the subcommands read it. As the kubectl plugin it runs on a workstation,
/// where `upgrade-check` can only mean the fleet's answer (there is no node to ask).
fn command_line(mut args: Vec<OsString>) -> Vec<OsString> {
    if started_as_plugin(&args)
        && args.get(1).is_some_and(|a| a == "upgrade-check")
        && !args.iter().any(|a| a == "--fleet")
    {
        args.insert(2, "--fleet".into());
    }
    args
}

fn parse_cli() -> Cli {
    let args = command_line(std::env::args_os().collect());
    let mut command = Cli::command();
    if started_as_plugin(&args) {
        command = command.bin_name("kubectl inplaced");
    }
    let matches = command.get_matches_from(args);
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

fn main() -> ExitCode {
    tune_malloc();
    let cli = parse_cli();
    let print_config = matches!(&cli.command, Command::Agent(a) if a.print_config);
    let result = match cli.command {
        Command::Agent(args) => match load_config(args) {
            Ok(config) if print_config => {
                println!("{config:#?}");
                return ExitCode::SUCCESS;
            }
            Ok(config) => {
                inplaced::logging::init(config.log_format, &config.log_filter());
                run_async(async move { agent::run(config).await.map(|()| ExitCode::SUCCESS) })
            }
            Err(code) => return code,
        },
        Command::Pods(args) => {
            inplaced::logging::init(LogFormat::Human, "warn");
            let output = args.output;
            match load_config(args.agent) {
                Ok(config) => run_async(pods_command(config, output)),
                Err(code) => return code,
            }
        }
        Command::UpgradeCheck(args) if args.fleet || args.nodes.is_some() => {
            inplaced::logging::init(LogFormat::Human, "warn");
            let output = match args.output {
                Output::Table => FleetOutput::Table,
                Output::Wide => FleetOutput::Wide,
                Output::Json => FleetOutput::Json,
            };
            let kubeconfig = args.agent.settings.kubeconfig.clone();
            run_async(async move {
                fleet::run(
                    kubeconfig.as_deref(),
                    &args.to,
                    args.nodes.as_deref(),
                    output,
                )
                .await
                .map(|()| ExitCode::SUCCESS)
            })
        }
        Command::UpgradeCheck(args) => {
            inplaced::logging::init(LogFormat::Human, "warn");
            let (to, output) = (args.to, args.output);
            match load_config(args.agent) {
                Ok(config) => run_async(upgrade_check_command(config, to, output)),
                Err(code) => return code,
            }
        }
        Command::Hash(args) => inplaced::hashing::cli::run(&args),
        Command::Resize(args) => {
            inplaced::logging::init(LogFormat::Human, "warn");
            run_async(inplaced::resize::cli::run(args))
        }
        Command::Restart(args) if args.selector.is_some() => {
            inplaced::logging::init(LogFormat::Human, "warn");
            run_async(inplaced::rollout::cli::restart_selector(args))
        }
        Command::Restart(args) => {
            inplaced::logging::init(LogFormat::Human, "warn");
            run_async(inplaced::restartrequest::cli::run(args))
        }
        Command::Rollout(args) => {
            inplaced::logging::init(LogFormat::Human, "warn");
            run_async(inplaced::rollout::cli::run(args))
        }
        Command::Runtime(args) => {
            inplaced::logging::init(LogFormat::Human, "warn");
            run_async(runtime_command(args))
        }
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// glibc gives threads that allocate concurrently malloc arenas of their own, and memory freed
/// in one is not reused by another: for a small long-running daemon one arena keeps the
/// resident set down (node-scale benchmark in BENCHMARKS.md); its lock is not contended here.
/// Fixed mmap and trim thresholds: by default glibc raises its mmap threshold to the size of
/// each large block freed, so the runtime listing's megabyte-sized buffers, allocated on every
/// refresh, land in the heap and leave holes there that stay resident.
fn tune_malloc() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only tunes the allocator; called first thing, before any thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 64 * 1024);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 128 * 1024);
    }
}

fn load_config(args: AgentArgs) -> Result<Config, ExitCode> {
    Config::load(args.settings, args.config.as_deref()).map_err(|err| {
        eprintln!("error: {err}");
        ExitCode::from(EXIT_CONFIG)
    })
}

/// One runtime thread: the agent's work per event is small, and on one thread every hand-off
/// on a reaction's path (API watch → controller → CRI connection) is a task switch, where on
/// several it can wake a parked worker, which on a busy node waits for a core each time.
/// Blocking work (the journal's fsync, systemd notifications) has threads of its own.
fn run_async<F: std::future::Future<Output = anyhow::Result<ExitCode>>>(
    future: F,
) -> anyhow::Result<ExitCode> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(future)
}

async fn runtime_command(args: RuntimeArgs) -> anyhow::Result<ExitCode> {
    let endpoint = CriEndpoint::resolve(args.cri_endpoint.as_deref())?;
    let client = CriClient::new(CriConfig::new(endpoint));
    let info = client.version().await?;
    if args.json {
        println!("{}", serde_json::to_string(&info)?);
    } else {
        println!(
            "{} {} (CRI {}) at {}",
            info.runtime_name,
            info.runtime_version,
            info.runtime_api_version,
            client.endpoint()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Asks the running agent; when none answers, builds the view here.
async fn pods_command(config: Config, output: Output) -> anyhow::Result<ExitCode> {
    let view: NodeView = match admin::request(&config.admin_socket, &AdminRequest::Pods).await {
        Ok(value) => serde_json::from_value(value)?,
        Err(AdminError::Connect { .. }) => {
            eprintln!(
                "note: no agent answers on {}; listing the runtime and the API directly",
                config.admin_socket.display()
            );
            inspect::snapshot(&config).await?
        }
        Err(err) => return Err(err.into()),
    };
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&view)?),
        Output::Table | Output::Wide => {
            print!("{}", inspect::table(&view));
            let gate = through_kubelet::resize_gate_from_kubelet_config(&config.kubelet_config);
            println!(
                "\n{}",
                through_kubelet::actuator_line(&view, config.resize_actuator, gate)
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Asks the running agent; when none answers, checks a view built here.
async fn upgrade_check_command(
    config: Config,
    to: String,
    output: Output,
) -> anyhow::Result<ExitCode> {
    let target = KubeletVersion::parse(&to)?;
    let request = AdminRequest::UpgradeCheck { to: to.clone() };
    let report: UpgradeReport = match admin::request(&config.admin_socket, &request).await {
        Ok(value) => serde_json::from_value(value)?,
        Err(AdminError::Connect { .. }) => {
            eprintln!(
                "note: no agent answers on {}; listing the runtime and the API directly",
                config.admin_socket.display()
            );
            let mut report = nodeview::upgrade_check(&inspect::snapshot(&config).await?, &target);
            report.checkpoints = checkpoints::check(&config.kubelet_root_dir, &target);
            report
        }
        Err(err) => return Err(err.into()),
    };
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        Output::Table | Output::Wide => print!("{}", inspect::upgrade_table(&report)),
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn as_the_kubectl_plugin_upgrade_check_is_the_fleets_answer() {
        assert_eq!(
            command_line(line(&[
                "/home/u/.krew/bin/kubectl-inplaced",
                "upgrade-check",
                "--to",
                "1.36"
            ])),
            line(&[
                "/home/u/.krew/bin/kubectl-inplaced",
                "upgrade-check",
                "--fleet",
                "--to",
                "1.36"
            ])
        );
        // Said already, or another command: as given.
        let fleet = line(&[
            "kubectl-inplaced",
            "upgrade-check",
            "--to",
            "1.36",
            "--fleet",
        ]);
        assert_eq!(command_line(fleet.clone()), fleet);
        let restart = line(&["kubectl-inplaced", "restart", "-l", "app=web"]);
        assert_eq!(command_line(restart.clone()), restart);
    }

    #[test]
    fn as_inplaced_upgrade_check_is_this_nodes_answer() {
        let node = line(&["/usr/bin/inplaced", "upgrade-check", "--to", "1.36"]);
        assert_eq!(command_line(node.clone()), node);
        assert!(!started_as_plugin(&line(&["kubectl-inplaced-old"])));
        assert!(started_as_plugin(&line(&["kubectl-inplaced"])));
    }
}
