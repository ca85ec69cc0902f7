//! The agent's settings: flags > environment > config file > defaults. One struct serves the
//! command line (clap: flags, then environment) and the file (TOML, keys named like the flags),
//! so every setting is spelled one way everywhere. Unknown keys and bad values are one clear error.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::resize::ActuatorSetting;
use crate::resize::cgroup;

pub(crate) const DEFAULT_CONFIG_FILE: &str = "/etc/inplaced/config.toml";
pub(crate) const DEFAULT_KUBECONFIG: &str = "/etc/inplaced/kubeconfig";
/// kruise-daemon holds :10221 on nodes where it still runs; 10231 keeps clear of it and of the
/// kubelet (10250, 10255), kube-proxy (10249, 10256) and the control plane (10257, 10259).
pub(crate) const DEFAULT_LISTEN_ADDRESS: &str = "0.0.0.0:10231";
pub(crate) const DEFAULT_ADMIN_SOCKET: &str = "/run/inplaced/admin.sock";
pub(crate) const DEFAULT_STATE_DIR: &str = "/var/lib/inplaced";
/// kubeadm's location of the kubelet's config file.
pub(crate) const DEFAULT_KUBELET_CONFIG: &str = "/var/lib/kubelet/config.yaml";
pub(crate) const DEFAULT_KUBELET_ROOT_DIR: &str = "/var/lib/kubelet";
const MAX_ENV_RESTART_SETTLE: Duration = Duration::from_secs(300);
/// kube-rs's client logs every failed API request at ERROR under this target, without context;
/// the agent reports the same failures itself, once per outage and with what they affect.
const KUBE_CLIENT_TRACE: &str = "kube_client::client::builder";

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum LogFormat {
    #[default]
    Human,
    Json,
}

/// Settings as given: every field optional, so that sources can be layered.
#[derive(Clone, Debug, Default, Deserialize, clap::Args)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Settings {
    /// This node's name as the API server knows it [default: $NODE_NAME, then the hostname]
    #[arg(long, env = "NODE_NAME")]
    pub node_name: Option<String>,
    /// kubeconfig to reach the API server [default: $KUBECONFIG, then /etc/inplaced/kubeconfig
    /// when present, then in-cluster]
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// CRI socket, unix:///path or /path [default: discovered in kruise-daemon's order]
    #[arg(long, env = "INPLACED_CRI_ENDPOINT")]
    pub cri_endpoint: Option<String>,
    /// Address for /metrics, /healthz and /readyz [default: 0.0.0.0:10231]
    #[arg(long, env = "INPLACED_LISTEN_ADDRESS")]
    pub listen_address: Option<String>,
    /// Root-only unix socket that `inplaced pods` and `upgrade-check` ask [default: /run/inplaced/admin.sock]
    #[arg(long, env = "INPLACED_ADMIN_SOCKET")]
    pub admin_socket: Option<PathBuf>,
    /// Directory for the agent's durable state [default: /var/lib/inplaced]
    #[arg(long, env = "INPLACED_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// How often the runtime is listed when it has no event stream while things change (8x as
    /// long while nothing does), e.g. 2s [default: 2s]
    #[arg(long, env = "INPLACED_REFRESH_INTERVAL")]
    pub refresh_interval: Option<String>,
    /// Longest random wait before the first API list, spreading a fleet's restarts [default: 3s]
    #[arg(long, env = "INPLACED_STARTUP_JITTER")]
    pub startup_jitter: Option<String>,
    /// Steady API requests per second this agent may send [default: 50]
    #[arg(long, env = "INPLACED_API_QPS")]
    pub api_qps: Option<u32>,
    /// Requests allowed above api-qps in a burst [default: 100]
    #[arg(long, env = "INPLACED_API_BURST")]
    pub api_burst: Option<u32>,
    /// How long an API request may wait for its answer to begin before it fails and is retried
    /// (a watch's answer begins at once), e.g. 30s [default: 30s]
    #[arg(long, env = "INPLACED_API_ANSWER_TIMEOUT")]
    pub api_answer_timeout: Option<String>,
    /// Handle ContainerRecreateRequests even while a kruise-daemon pod runs on this node
    /// (both agents would act on the same requests) [default: false]
    #[arg(long, env = "INPLACED_IGNORE_KRUISE_DAEMON", num_args = 0..=1, default_missing_value = "true")]
    pub ignore_kruise_daemon: Option<bool>,
    /// How ContainerResizeRequests are carried out: auto (through the kubelet where it resizes
    /// in place, else through CRI), kubelet, or cri [default: auto]
    #[arg(long, env = "INPLACED_RESIZE_ACTUATOR", value_enum)]
    pub resize_actuator: Option<ActuatorSetting>,
    /// The kubelet's config file, read for its InPlacePodVerticalScaling feature gate
    /// [default: /var/lib/kubelet/config.yaml]
    #[arg(long, env = "INPLACED_KUBELET_CONFIG")]
    pub kubelet_config: Option<PathBuf>,
    /// The kubelet's root directory (its `--root-dir`), where `upgrade-check` reads the
    /// kubelet's pod-resource checkpoint files [default: /var/lib/kubelet]
    #[arg(long, env = "INPLACED_KUBELET_ROOT_DIR")]
    pub kubelet_root_dir: Option<PathBuf>,
    /// Where the cgroup filesystem is mounted [default: /sys/fs/cgroup]
    #[arg(long, env = "INPLACED_CGROUP_ROOT")]
    pub cgroup_root: Option<PathBuf>,
    /// How long a pod's changed labels or annotations must have been seen before an
    /// env-from-metadata restart kills the container, so that the kubelet has the change when it
    /// starts the new one, e.g. 1s (at most 5m) [default: 1s]
    #[arg(long, env = "INPLACED_ENV_RESTART_SETTLE")]
    pub env_restart_settle: Option<String>,
    /// Env-from-metadata restarts allowed on this node per minute, in bursts of the same size
    /// (at least 1) [default: 10]
    #[arg(long, env = "INPLACED_ENV_RESTARTS_PER_MINUTE")]
    pub env_restarts_per_minute: Option<u32>,
    /// How long a worker of the agent (a request loop, a controller) may go without progress
    /// before /healthz fails and the systemd watchdog is no longer pinged, e.g. 60s (at least
    /// 1s) [default: 60s]
    #[arg(long, env = "INPLACED_STUCK_WORKER_AFTER")]
    pub stuck_worker_after: Option<String>,
    /// Kubelet releases whose upgrade this node's answer is computed for (metrics and its
    /// NodeUpgradeCheck), comma-separated, e.g. 1.34,1.35 (at most 8) [default: the next two
    /// minor releases after the node's kubelet]
    #[arg(long, env = "INPLACED_UPGRADE_TARGETS")]
    pub upgrade_targets: Option<String>,
    /// The kubelet's process name (as /proc/<pid>/comm shows it), to notice its restarts
    /// [default: kubelet]
    #[arg(long, env = "INPLACED_KUBELET_PROCESS_NAME")]
    pub kubelet_process_name: Option<String>,
    /// Log format on stderr [default: human]
    #[arg(long, env = "INPLACED_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    /// Log filter, e.g. info or inplaced=debug [default: info]
    #[arg(long, env = "INPLACED_LOG")]
    pub log_level: Option<String>,
}

impl Settings {
    /// Fills every field still unset from `lower`.
    fn or(self, lower: Settings) -> Settings {
        Settings {
            node_name: self.node_name.or(lower.node_name),
            kubeconfig: self.kubeconfig.or(lower.kubeconfig),
            cri_endpoint: self.cri_endpoint.or(lower.cri_endpoint),
            listen_address: self.listen_address.or(lower.listen_address),
            admin_socket: self.admin_socket.or(lower.admin_socket),
            state_dir: self.state_dir.or(lower.state_dir),
            refresh_interval: self.refresh_interval.or(lower.refresh_interval),
            startup_jitter: self.startup_jitter.or(lower.startup_jitter),
            api_qps: self.api_qps.or(lower.api_qps),
            api_burst: self.api_burst.or(lower.api_burst),
            api_answer_timeout: self.api_answer_timeout.or(lower.api_answer_timeout),
            ignore_kruise_daemon: self.ignore_kruise_daemon.or(lower.ignore_kruise_daemon),
            resize_actuator: self.resize_actuator.or(lower.resize_actuator),
            kubelet_config: self.kubelet_config.or(lower.kubelet_config),
            kubelet_root_dir: self.kubelet_root_dir.or(lower.kubelet_root_dir),
            cgroup_root: self.cgroup_root.or(lower.cgroup_root),
            env_restart_settle: self.env_restart_settle.or(lower.env_restart_settle),
            env_restarts_per_minute: self
                .env_restarts_per_minute
                .or(lower.env_restarts_per_minute),
            stuck_worker_after: self.stuck_worker_after.or(lower.stuck_worker_after),
            upgrade_targets: self.upgrade_targets.or(lower.upgrade_targets),
            kubelet_process_name: self.kubelet_process_name.or(lower.kubelet_process_name),
            log_format: self.log_format.or(lower.log_format),
            log_level: self.log_level.or(lower.log_level),
        }
    }
}

/// The settings in force, validated.
#[derive(Clone, Debug)]
pub struct Config {
    pub node_name: String,
    /// `None`: in-cluster configuration.
    pub kubeconfig: Option<PathBuf>,
    pub cri_endpoint: Option<String>,
    pub listen_address: SocketAddr,
    pub admin_socket: PathBuf,
    pub state_dir: PathBuf,
    pub refresh_interval: Duration,
    pub startup_jitter: Duration,
    pub api_qps: u32,
    pub api_burst: u32,
    pub api_answer_timeout: Duration,
    pub ignore_kruise_daemon: bool,
    pub resize_actuator: ActuatorSetting,
    pub kubelet_config: PathBuf,
    pub kubelet_root_dir: PathBuf,
    pub cgroup_root: PathBuf,
    pub env_restart_settle: Duration,
    pub env_restarts_per_minute: u32,
    pub stuck_worker_after: Duration,
    /// Empty: the next two minors after the node's kubelet.
    pub upgrade_targets: Vec<crate::hashing::KubeletVersion>,
    pub kubelet_process_name: String,
    pub log_format: LogFormat,
    /// The log filter as given; [`Config::log_filter`] is what is applied.
    pub log_level: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("invalid {key} {value:?}: {reason}")]
    Invalid {
        key: &'static str,
        value: String,
        reason: String,
    },
    #[error("cannot tell this node's name: set --node-name or NODE_NAME ({0})")]
    NoNodeName(String),
}

impl Config {
    /// Layers `given` (flags and environment, already merged by clap) over the config file
    /// (`config_file`, else the default file when it exists) over the defaults.
    pub fn load(given: Settings, config_file: Option<&Path>) -> Result<Config, ConfigError> {
        let file = match config_file {
            Some(path) => Some(read_file(path)?),
            None if Path::new(DEFAULT_CONFIG_FILE).exists() => {
                Some(read_file(Path::new(DEFAULT_CONFIG_FILE))?)
            }
            None => None,
        };
        Self::resolve(given.or(file.unwrap_or_default()))
    }

    /// The settings in force: each value checked in turn (the first bad one is the error),
    /// defaults filling what is unset.
    fn resolve(s: Settings) -> Result<Config, ConfigError> {
        let node_name = node_name(s.node_name)?;
        let kubeconfig = s.kubeconfig.or_else(|| {
            let default = PathBuf::from(DEFAULT_KUBECONFIG);
            default.exists().then_some(default)
        });
        let listen_address = listen_address(s.listen_address)?;
        let (api_qps, api_burst) = api_rate(s.api_qps, s.api_burst)?;
        let refresh_interval = refresh_interval(s.refresh_interval)?;
        if let Some(endpoint) = &s.cri_endpoint {
            check_cri_endpoint(endpoint)?;
        }
        let log_level = s.log_level.unwrap_or_else(|| "info".into());
        check_log_level(&log_level)?;
        let api_answer_timeout = api_answer_timeout(s.api_answer_timeout)?;
        let (env_restart_settle, env_restarts_per_minute) =
            env_restart_pacing(s.env_restart_settle, s.env_restarts_per_minute)?;
        let stuck_worker_after = stuck_worker_after(s.stuck_worker_after)?;
        let upgrade_targets = match &s.upgrade_targets {
            None => Vec::new(),
            Some(text) => upgrade_targets(text)?,
        };
        Ok(Config {
            node_name,
            kubeconfig,
            cri_endpoint: s.cri_endpoint,
            listen_address,
            admin_socket: s
                .admin_socket
                .unwrap_or_else(|| DEFAULT_ADMIN_SOCKET.into()),
            state_dir: s.state_dir.unwrap_or_else(|| DEFAULT_STATE_DIR.into()),
            refresh_interval,
            startup_jitter: duration("startup-jitter", s.startup_jitter, "3s")?,
            api_qps,
            api_burst,
            api_answer_timeout,
            ignore_kruise_daemon: s.ignore_kruise_daemon.unwrap_or(false),
            resize_actuator: s.resize_actuator.unwrap_or_default(),
            kubelet_config: s
                .kubelet_config
                .unwrap_or_else(|| DEFAULT_KUBELET_CONFIG.into()),
            kubelet_root_dir: s
                .kubelet_root_dir
                .unwrap_or_else(|| DEFAULT_KUBELET_ROOT_DIR.into()),
            cgroup_root: s.cgroup_root.unwrap_or_else(|| cgroup::DEFAULT_ROOT.into()),
            env_restart_settle,
            env_restarts_per_minute,
            stuck_worker_after,
            upgrade_targets,
            kubelet_process_name: s
                .kubelet_process_name
                .unwrap_or_else(|| "kubelet".to_owned()),
            log_format: s.log_format.unwrap_or_default(),
            log_level,
        })
    }
}

/// The node's name as given, else the hostname; a valid one.
fn node_name(given: Option<String>) -> Result<String, ConfigError> {
    let node_name = match given {
        Some(name) => name,
        None => hostname()?,
    };
    validate_node_name(&node_name)?;
    Ok(node_name)
}

fn listen_address(given: Option<String>) -> Result<SocketAddr, ConfigError> {
    let listen_text = given.unwrap_or_else(|| DEFAULT_LISTEN_ADDRESS.into());
    listen_text
        .parse()
        .map_err(|err: std::net::AddrParseError| ConfigError::Invalid {
            key: "listen-address",
            value: listen_text.clone(),
            reason: format!("{err}; expected host:port such as 127.0.0.1:10231"),
        })
}

/// `api-qps` and `api-burst`: the burst is by default 100, or the qps when that is more.
fn api_rate(qps: Option<u32>, burst: Option<u32>) -> Result<(u32, u32), ConfigError> {
    let api_qps = qps.unwrap_or(50);
    if api_qps == 0 {
        return Err(invalid("api-qps", "0", "must be at least 1"));
    }
    let api_burst = burst.unwrap_or(100.max(api_qps));
    if api_burst < api_qps {
        return Err(invalid(
            "api-burst",
            &api_burst.to_string(),
            "must be at least api-qps",
        ));
    }
    Ok((api_qps, api_burst))
}

fn refresh_interval(given: Option<String>) -> Result<Duration, ConfigError> {
    let refresh_interval = duration("refresh-interval", given, "2s")?;
    if refresh_interval < Duration::from_millis(100) {
        return Err(invalid(
            "refresh-interval",
            &format!("{refresh_interval:?}"),
            "must be at least 100ms",
        ));
    }
    Ok(refresh_interval)
}

fn check_cri_endpoint(endpoint: &str) -> Result<(), ConfigError> {
    crate::cri::CriEndpoint::parse(endpoint).map_err(|_| {
        invalid(
            "cri-endpoint",
            endpoint,
            "expected an absolute unix socket path, such as unix:///run/containerd/containerd.sock",
        )
    })?;
    Ok(())
}

fn api_answer_timeout(given: Option<String>) -> Result<Duration, ConfigError> {
    let api_answer_timeout = duration("api-answer-timeout", given, "30s")?;
    if api_answer_timeout.is_zero() {
        return Err(invalid(
            "api-answer-timeout",
            "0s",
            "must be longer than zero",
        ));
    }
    Ok(api_answer_timeout)
}

/// `env-restart-settle` and `env-restarts-per-minute`.
fn env_restart_pacing(
    settle: Option<String>,
    per_minute: Option<u32>,
) -> Result<(Duration, u32), ConfigError> {
    let env_restart_settle = duration("env-restart-settle", settle, "1s")?;
    if env_restart_settle > MAX_ENV_RESTART_SETTLE {
        return Err(invalid(
            "env-restart-settle",
            &format!("{env_restart_settle:?}"),
            "must be at most 5m: a restart waits that long after the change",
        ));
    }
    let env_restarts_per_minute = per_minute.unwrap_or(10);
    if env_restarts_per_minute == 0 {
        return Err(invalid(
            "env-restarts-per-minute",
            "0",
            "must be at least 1",
        ));
    }
    Ok((env_restart_settle, env_restarts_per_minute))
}

fn stuck_worker_after(given: Option<String>) -> Result<Duration, ConfigError> {
    let stuck_worker_after = duration("stuck-worker-after", given, "60s")?;
    if stuck_worker_after < Duration::from_secs(1) {
        return Err(invalid(
            "stuck-worker-after",
            &format!("{stuck_worker_after:?}"),
            "must be at least 1s",
        ));
    }
    Ok(stuck_worker_after)
}

/// `upgrade-targets` as given: comma-separated kubelet releases, empty entries skipped.
fn upgrade_targets(text: &str) -> Result<Vec<crate::hashing::KubeletVersion>, ConfigError> {
    let targets = text
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(crate::hashing::KubeletVersion::parse)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid("upgrade-targets", text, &e.to_string()))?;
    if targets.len() > 8 {
        return Err(invalid("upgrade-targets", text, "at most 8 releases"));
    }
    Ok(targets)
}

impl Config {
    /// The log filter to apply: `log-level`, with kube-rs's per-request ERROR lines off unless
    /// the filter names that target (or `kube_client`) itself.
    pub fn log_filter(&self) -> String {
        quiet_kube_client(&self.log_level)
    }

    /// The bounds on the agent's API traffic.
    pub fn api_limits(&self) -> crate::kube::ApiLimits {
        crate::kube::ApiLimits {
            qps: self.api_qps,
            burst: self.api_burst,
            answer_deadline: self.api_answer_timeout,
        }
    }
}

fn quiet_kube_client(filter: &str) -> String {
    if filter.contains("kube_client") {
        filter.to_owned()
    } else {
        format!("{filter},{KUBE_CLIENT_TRACE}=off")
    }
}

fn read_file(path: &Path) -> Result<Settings, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    toml::from_str(&text).map_err(|err| {
        let line = err.span().map_or(0, |span| {
            text[..span.start.min(text.len())].matches('\n').count() + 1
        });
        ConfigError::Parse {
            path: path.to_owned(),
            message: format!("line {line}: {}", err.message()),
        }
    })
}

/// A `tracing` filter whose bare words are levels: `warning` alone would parse as a target and
/// switch every other log line off, so it is refused (a target alone is written `target=trace`).
fn check_log_level(filter: &str) -> Result<(), ConfigError> {
    const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];
    let hint = "expected a level (trace, debug, info, warn, error, off) or directives such as info,inplaced=debug";
    let bare_non_level = filter.split(',').map(str::trim).find(|d| {
        let is_level = LEVELS.contains(&d.to_ascii_lowercase().as_str())
            || (d.len() == 1 && d.as_bytes()[0].is_ascii_digit());
        // `[span]` alone is a span directive, not a target.
        !d.is_empty() && !d.contains('=') && !d.starts_with('[') && !is_level
    });
    if let Some(word) = bare_non_level {
        return Err(invalid(
            "log-level",
            filter,
            &format!("{word:?} is not a level; {hint}"),
        ));
    }
    tracing_subscriber::EnvFilter::try_new(filter)
        .map(drop)
        .map_err(|err| invalid("log-level", filter, &format!("{err}; {hint}")))
}

fn invalid(key: &'static str, value: &str, reason: &str) -> ConfigError {
    ConfigError::Invalid {
        key,
        value: value.to_owned(),
        reason: reason.to_owned(),
    }
}

fn duration(
    key: &'static str,
    given: Option<String>,
    default: &str,
) -> Result<Duration, ConfigError> {
    let text = given.unwrap_or_else(|| default.to_owned());
    humantime::parse_duration(&text).map_err(|err| {
        invalid(
            key,
            &text,
            &format!("{err}; expected a duration such as 2s or 500ms"),
        )
    })
}

/// A node name is a DNS subdomain (RFC 1123): the API server would reject anything else.
fn validate_node_name(name: &str) -> Result<(), ConfigError> {
    let valid = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
    if valid {
        Ok(())
    } else {
        Err(invalid(
            "node-name",
            name,
            "not a lowercase RFC 1123 DNS subdomain",
        ))
    }
}

/// kubelet's default node name is the lowercased hostname.
fn hostname() -> Result<String, ConfigError> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_lowercase())
        .map_err(|err| ConfigError::NoNodeName(err.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(toml_text: &str) -> Settings {
        toml::from_str(toml_text).unwrap()
    }

    #[test]
    fn higher_layer_wins_field_by_field() {
        let flags = Settings {
            node_name: Some("from-flags".into()),
            ..Default::default()
        };
        let file = settings("node-name = \"from-file\"\nlisten-address = \"127.0.0.1:9999\"\n");
        let config = Config::resolve(flags.or(file)).unwrap();
        assert_eq!(config.node_name, "from-flags");
        assert_eq!(config.listen_address, "127.0.0.1:9999".parse().unwrap());
        assert_eq!(config.refresh_interval, Duration::from_secs(2), "default");
    }

    #[test]
    fn defaults_apply_when_nothing_is_given() {
        let config = Config::resolve(Settings {
            node_name: Some("n1".into()),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(
            config.listen_address,
            DEFAULT_LISTEN_ADDRESS.parse().unwrap()
        );
        assert_eq!(config.admin_socket, PathBuf::from(DEFAULT_ADMIN_SOCKET));
        assert_eq!((config.api_qps, config.api_burst), (50, 100));
        assert_eq!(config.api_answer_timeout, Duration::from_secs(30));
        assert_eq!(config.log_format, LogFormat::Human);
        assert_eq!(config.env_restart_settle, Duration::from_secs(1));
        assert_eq!(config.env_restarts_per_minute, 10);
    }

    #[test]
    fn env_restart_pacing_is_configurable() {
        let mut given = settings("env-restart-settle = \"3s\"\nenv-restarts-per-minute = 2");
        given.node_name = Some("n1".into());
        let config = Config::resolve(given).unwrap();
        assert_eq!(config.env_restart_settle, Duration::from_secs(3));
        assert_eq!(config.env_restarts_per_minute, 2);
    }

    /// kube-rs's trace layer logs each failed request at ERROR; the filter in force drops those
    /// lines unless the operator's filter asks for that target, and keeps everything else.
    #[test]
    fn kube_client_request_errors_are_quiet_unless_asked_for() {
        fn logged(filter: &str) -> String {
            let out = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
            let sink = out.clone();
            let subscriber = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                .with_writer(move || WriteTo(sink.clone()))
                .finish();
            tracing::subscriber::with_default(subscriber, || {
                tracing::error!(target: "kube_client::client::builder", "failed with error x");
                tracing::warn!(target: "inplaced::kube", "API server unreachable");
            });
            let text = out.lock().unwrap().clone();
            String::from_utf8(text).unwrap()
        }
        struct WriteTo(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for WriteTo {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let config = |level: &str| {
            let mut given = settings(&format!("log-level = \"{level}\""));
            given.node_name = Some("n1".into());
            Config::resolve(given).unwrap()
        };
        for level in ["info", "debug", "info,inplaced=debug"] {
            let text = logged(&config(level).log_filter());
            assert!(!text.contains("failed with error"), "{level}: {text}");
            assert!(text.contains("API server unreachable"), "{level}: {text}");
        }
        let text = logged(&config("info,kube_client=debug").log_filter());
        assert!(text.contains("failed with error"), "{text}");
    }

    #[test]
    fn log_filters_and_a_large_qps_are_taken() {
        for filter in [
            "debug",
            "WARN",
            "3",
            "info,inplaced=debug",
            "inplaced::recreate=trace",
            "info,hyper=off",
            "[kill]",
            "[kill]=debug",
        ] {
            check_log_level(filter).unwrap_or_else(|e| panic!("{filter}: {e}"));
        }
        let mut given = settings("api-qps = 500");
        given.node_name = Some("n1".into());
        let config = Config::resolve(given).unwrap();
        assert_eq!((config.api_qps, config.api_burst), (500, 500));
    }

    /// Releases are taken in the order given, blanks skipped; a bad release or more than 8
    /// are refused, naming the key.
    #[test]
    fn upgrade_targets_are_a_short_list_of_releases() {
        let minors = |text: &str| {
            upgrade_targets(text)
                .map(|targets| targets.iter().map(|t| t.minor()).collect::<Vec<u32>>())
        };
        assert_eq!(minors(" 1.35, v1.34.2,,").ok(), Some(vec![35, 34]));
        assert_eq!(minors("").ok(), Some(Vec::new()));
        let nine = (30..39).map(|m| format!("1.{m}")).collect::<Vec<_>>();
        assert_eq!(minors(&nine[..8].join(",")).ok().map(|m| m.len()), Some(8));
        for bad in [nine.join(","), "1.35,next".to_owned()] {
            let err = minors(&bad).expect_err("refused").to_string();
            assert!(err.contains("upgrade-targets"), "{bad}: {err}");
        }
    }

    #[test]
    fn unknown_keys_are_refused_by_name() {
        let err = toml::from_str::<Settings>("nod-name = \"x\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("nod-name"), "{err}");
    }

    #[test]
    fn bad_values_are_one_clear_error() {
        let cases = [
            ("listen-address = \"10231\"", "listen-address"),
            ("refresh-interval = \"often\"", "refresh-interval"),
            ("node-name = \"Bad_Name\"", "node-name"),
            ("api-qps = 0", "api-qps"),
            ("api-answer-timeout = \"0s\"", "api-answer-timeout"),
            ("api-answer-timeout = \"soon\"", "api-answer-timeout"),
            ("api-qps = 20\napi-burst = 10", "api-burst"),
            ("refresh-interval = \"0s\"", "refresh-interval"),
            ("cri-endpoint = \"tcp://127.0.0.1:1\"", "cri-endpoint"),
            ("log-level = \"warning\"", "log-level"),
            ("log-level = \"info,inplaced=loud\"", "log-level"),
            ("env-restart-settle = \"soon\"", "env-restart-settle"),
            ("env-restart-settle = \"6m\"", "env-restart-settle"),
            ("env-restarts-per-minute = 0", "env-restarts-per-minute"),
        ];
        for (text, key) in cases {
            let mut given = settings(text);
            given.node_name = given.node_name.or(Some("n1".into()));
            let err = Config::resolve(given).unwrap_err().to_string();
            assert!(err.contains(key), "{text}: {err}");
        }
    }
}
