//! Standalone API server double, for the local node sandbox: serves until Ctrl-C.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use apiserver_double::{ApiServer, Credential, PodResizeApi, ServerConfig, TlsSetup};
use clap::Parser;

#[derive(Parser, Debug)]
#[command(about = "In-memory Kubernetes API server double (test use only)")]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
    /// Write a kubeconfig for this server here.
    #[arg(long)]
    kubeconfig_out: Option<PathBuf>,
    /// TOKEN=USER pairs accepted as bearer tokens (repeatable); TOKEN=USER,GROUP,... gives
    /// the user groups too (e.g. `t=system:node:n1,system:nodes`).
    #[arg(long = "token", value_parser = parse_token)]
    tokens: Vec<(String, String)>,
    /// Token to put in the written kubeconfig.
    #[arg(long)]
    kubeconfig_token: Option<String>,
    /// Changes remembered per resource before older resourceVersions answer 410.
    #[arg(long, default_value_t = 1000)]
    history_limit: usize,
    /// Seconds between watch bookmarks.
    #[arg(long, default_value_t = 60)]
    bookmark_interval: u64,
    /// Delete scheduled pods gracefully (they stay until deleted with grace 0).
    #[arg(long)]
    graceful_pod_deletion: bool,
    /// The cluster release whose in-place resize API to serve (e.g. `1.31`: pod updates
    /// resize; `1.26`: none); default: `pods/resize` as from 1.33.
    #[arg(long, value_parser = parse_minor)]
    resize_api_of: Option<u32>,
    /// A custom resource (`plural.group`) whose CRD is not installed at start (repeatable):
    /// its paths answer 404 until a CRD for it is created.
    #[arg(long = "without-crd")]
    without_crds: Vec<String>,
    /// Serve HTTPS with this certificate (PEM; needs --tls-key).
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Authenticate client certificates issued by this CA (PEM; the user is the subject's
    /// common name). Needs --tls-cert.
    #[arg(long, requires = "tls_cert")]
    client_ca: Option<PathBuf>,
}

/// `1.31` or `v1.31.4` → 31.
fn parse_minor(s: &str) -> Result<u32, String> {
    s.trim_start_matches('v')
        .strip_prefix("1.")
        .and_then(|rest| rest.split('.').next())
        .and_then(|minor| minor.parse().ok())
        .ok_or_else(|| format!("expected a release like 1.31, got {s:?}"))
}

fn parse_token(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(t, u)| (t.to_owned(), u.to_owned()))
        .ok_or_else(|| format!("expected TOKEN=USER, got {s:?}"))
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let args = Args::parse();
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(TlsSetup {
            serving: Credential {
                cert_pem: std::fs::read_to_string(cert)?,
                key_pem: std::fs::read_to_string(key)?,
            },
            client_ca_pem: args
                .client_ca
                .as_ref()
                .map(std::fs::read_to_string)
                .transpose()?,
        }),
        _ => None,
    };
    let config = ServerConfig {
        listen: args.listen,
        history_limit: args.history_limit,
        bookmark_interval: Duration::from_secs(args.bookmark_interval.max(1)),
        tokens: HashMap::new(),
        graceful_pod_deletion: args.graceful_pod_deletion,
        extra_resources: vec![],
        // The gate is on: a cluster without it is what `1.26` gives.
        pod_resize: args
            .resize_api_of
            .map_or_else(PodResizeApi::default, |minor| {
                PodResizeApi::for_release(minor, true)
            }),
        absent_crds: args.without_crds,
        tls,
    };
    let server = ApiServer::start(config).await?;
    for (token, spec) in &args.tokens {
        let mut parts = spec.split(',');
        let user = parts.next().unwrap_or_default();
        let groups: Vec<&str> = parts.filter(|g| !g.is_empty()).collect();
        server.tokens().add_with_groups(token, user, &groups, None);
    }
    if let Some(path) = &args.kubeconfig_out {
        server.write_kubeconfig(path, args.kubeconfig_token.as_deref())?;
    }
    eprintln!("apiserver-double listening on {}", server.url());
    tokio::signal::ctrl_c().await?;
    Ok(())
}
