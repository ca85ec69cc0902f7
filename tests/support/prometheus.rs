//! A real Prometheus server for end-to-end tests: Debian's package (installed by
//! `tests/node/prometheus.sh install`, which `tests/run-all.sh` runs), started on loopback with a
//! temp config and TSDB, scraping one target every second, and queried through its HTTP API.

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::agent::free_port;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/node/prometheus.sh");

/// The job of the one scrape config: every scraped series carries `job="inplaced"`.
pub const JOB: &str = "inplaced";

/// The package's binary as `prometheus.sh path` names it. Fails the test, never skips it, when
/// Prometheus is not installed.
pub fn binary() -> String {
    let output = std::process::Command::new(SCRIPT)
        .arg("path")
        .output()
        .expect("run tests/node/prometheus.sh path");
    assert!(
        output.status.success(),
        "Prometheus is not installed: run `tests/node/prometheus.sh install` as root \
         (tests/run-all.sh does): {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// One sample of an instant vector: its labels and value.
#[derive(Debug)]
pub struct Sample {
    pub labels: Value,
    pub value: f64,
}

pub struct Prometheus {
    child: tokio::process::Child,
    pub address: SocketAddr,
    /// kube's HTTP client (hyper underneath), already a dependency: no other HTTP client crate.
    http: kube::Client,
    dir: tempfile::TempDir,
}

impl Prometheus {
    /// Starts `prometheus` scraping `target`'s /metrics every second; returns once it is ready.
    /// The process is killed by its PID when this is dropped.
    pub async fn start(target: SocketAddr) -> Prometheus {
        let binary = binary();
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
                 scrape_configs:\n  - job_name: {JOB}\n    static_configs:\n      \
                 - targets: ['{target}']\n"
            ),
        )
        .expect("write prometheus.yml");
        let address = free_port();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).expect("log file");
        let child = tokio::process::Command::new(&binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("tsdb").display()
            ))
            .arg(format!("--web.listen-address={address}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("start {binary}: {e}"));
        let url = format!("http://{address}").parse().expect("a loopback URL");
        let http = kube::Client::try_from(kube::Config::new(url)).expect("HTTP client");
        let mut prometheus = Prometheus {
            child,
            address,
            http,
            dir,
        };
        prometheus.wait_ready(Duration::from_secs(30)).await;
        prometheus
    }

    async fn wait_ready(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let last = self.get("/-/ready").await;
            if last.is_ok() {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("prometheus exited with {status}:\n{}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "prometheus not ready within {timeout:?}: {last:?}\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// What the server logged so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// `GET path_and_query`: the body, or the error with the body of a non-2xx answer.
    pub async fn get(&self, path_and_query: &str) -> Result<String, String> {
        let request = http::Request::get(path_and_query)
            .body(Vec::new())
            .map_err(|e| e.to_string())?;
        self.http
            .request_text(request)
            .await
            .map_err(|e| e.to_string())
    }

    /// An instant query evaluated at `time` (Unix seconds; the server's now when `None`): the
    /// `data` of a `"status": "success"` answer, else the whole answer as the error.
    pub async fn query_at(&self, expr: &str, time: Option<f64>) -> Result<Value, String> {
        let mut path = format!("/api/v1/query?query={}", percent_encode(expr));
        if let Some(time) = time {
            path.push_str(&format!("&time={time:.3}"));
        }
        let body = self.get(&path).await.map_err(|e| format!("{expr}: {e}"))?;
        let answer: Value =
            serde_json::from_str(&body).map_err(|e| format!("{expr}: {e}: {body}"))?;
        if answer["status"] != "success" {
            return Err(format!("{expr}: {body}"));
        }
        Ok(answer["data"].clone())
    }

    /// The samples of an instant-vector query at `time` (now when `None`); fails the test on an
    /// error.
    pub async fn vector_at(&self, expr: &str, time: Option<f64>) -> Vec<Sample> {
        let data = self
            .query_at(expr, time)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        samples(&data).unwrap_or_else(|| panic!("{expr}: not an instant vector: {data}"))
    }

    /// The samples of an instant-vector query now.
    pub async fn vector(&self, expr: &str) -> Vec<Sample> {
        self.vector_at(expr, None).await
    }

    /// The value of a query that must yield exactly one sample.
    pub async fn single_value(&self, expr: &str) -> f64 {
        single(expr, &self.vector(expr).await)
    }

    /// Polls an instant-vector query until its samples satisfy `done`; returns them.
    pub async fn wait_vector(
        &self,
        expr: &str,
        timeout: Duration,
        done: impl Fn(&[Sample]) -> bool,
    ) -> Vec<Sample> {
        let deadline = Instant::now() + timeout;
        loop {
            let found = self.vector(expr).await;
            if done(&found) {
                return found;
            }
            assert!(
                Instant::now() < deadline,
                "{expr} never got there within {timeout:?}; last: {found:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Kills the server by its PID and waits for it.
    pub async fn stop(mut self) {
        self.child.kill().await.expect("kill prometheus");
    }
}

/// The one sample's value; fails the test when there are none or several.
pub fn single(expr: &str, samples: &[Sample]) -> f64 {
    match samples {
        [only] => only.value,
        _ => panic!("{expr}: expected one sample, got {samples:?}"),
    }
}

/// A sample value as the API writes it: a string (`"1"`, `"0.25"`, `"+Inf"`, `"NaN"`).
pub fn sample_value(pair: &Value) -> Option<f64> {
    pair.get(1)?.as_str()?.parse().ok()
}

/// The samples of an instant-vector answer's `data`.
pub fn samples(data: &Value) -> Option<Vec<Sample>> {
    if data["resultType"] != "vector" {
        return None;
    }
    data["result"]
        .as_array()?
        .iter()
        .map(|series| {
            Some(Sample {
                labels: series["metric"].clone(),
                value: sample_value(&series["value"])?,
            })
        })
        .collect()
}

/// Percent-encodes a query parameter value (every byte but RFC 3986's unreserved characters).
pub fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
