//! The inplaced binary: wires the library's modules to a command line.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use inplaced::cri::{CriClient, CriConfig, CriEndpoint};

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
    /// Ask the container runtime who it is (CRI Version) and whether it speaks CRI v1.
    Runtime(RuntimeArgs),
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("INPLACED_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let result = match cli.command {
        Command::Runtime(args) => run_async(runtime_command(args)),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

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
