//! The agent binary as a child process, with a real `NOTIFY_SOCKET` datagram socket and HTTP.

use std::net::SocketAddr;
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

pub struct AgentProcess {
    child: Child,
    /// Everything the agent wrote to stderr (its log), also passed on to the test's stderr.
    log: Arc<Mutex<String>>,
    notify: UnixDatagram,
    pub listen: SocketAddr,
    pub admin_socket: PathBuf,
    pub dir: tempfile::TempDir,
    /// Every notification received so far, in order.
    pub notifications: Vec<String>,
}

/// A free loopback port (bound and released: the agent binds it right after).
pub fn free_port() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr")
}

impl AgentProcess {
    /// Starts `inplaced agent` with `args` plus a private admin socket, listen address and
    /// NOTIFY_SOCKET; `watchdog` sets WATCHDOG_USEC.
    pub fn start(args: &[&str], watchdog: Option<Duration>) -> AgentProcess {
        Self::start_with_env(args, watchdog, &[])
    }

    /// As [`AgentProcess::start`], with more environment variables for the agent (e.g. a test
    /// fault switch).
    pub fn start_with_env(
        args: &[&str],
        watchdog: Option<Duration>,
        env: &[(&str, &str)],
    ) -> AgentProcess {
        let dir = tempfile::tempdir().expect("tempdir");
        let notify_path = dir.path().join("notify.sock");
        let notify = UnixDatagram::bind(&notify_path).expect("bind notify socket");
        notify
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let listen = free_port();
        let admin_socket = dir.path().join("admin/admin.sock");
        let mut command = Command::new(env!("CARGO_BIN_EXE_inplaced"));
        command
            .arg("agent")
            .args(["--listen-address", &listen.to_string()])
            .args(["--admin-socket", admin_socket.to_str().unwrap()])
            .args(["--startup-jitter", "0s"])
            .args(args)
            .env("NOTIFY_SOCKET", &notify_path)
            .env_remove("KUBECONFIG")
            .env_remove("NODE_NAME")
            .stdin(Stdio::null());
        // The kubelet's start is read from the process of that name: the stand-ins have none,
        // and a real kubelet of the real tier (tests/real_kube_e2e.rs) running beside this test
        // must not count as this node's kubelet restarting. Tests that want one name it.
        if !args.contains(&"--kubelet-process-name") {
            command.args(["--kubelet-process-name", "no-kubelet"]);
        }
        // Quick runtime listings for tests, unless the caller sets its own (benchmarks).
        if !args.contains(&"--refresh-interval") {
            command.args(["--refresh-interval", "300ms"]);
        }
        if !args.contains(&"--state-dir") {
            command.args(["--state-dir", dir.path().join("state").to_str().unwrap()]);
        }
        if let Some(interval) = watchdog {
            command.env("WATCHDOG_USEC", interval.as_micros().to_string());
        }
        command.envs(env.iter().copied());
        command.stderr(Stdio::piped());
        let mut child = command.spawn().expect("start inplaced agent");
        let log = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().expect("piped stderr");
        let sink = log.clone();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                eprintln!("{line}");
                let mut log = sink.lock().unwrap_or_else(|e| e.into_inner());
                log.push_str(&line);
                log.push('\n');
            }
        });
        AgentProcess {
            child,
            log,
            notify,
            listen,
            admin_socket,
            dir,
            notifications: Vec::new(),
        }
    }

    /// Waits until a notification line satisfies `matches`; returns that line.
    pub fn wait_notification(
        &mut self,
        timeout: Duration,
        matches: impl Fn(&str) -> bool,
    ) -> String {
        let deadline = Instant::now() + timeout;
        if let Some(found) = self.notifications.iter().find(|n| matches(n)) {
            return found.clone();
        }
        while Instant::now() < deadline {
            let mut buf = [0u8; 4096];
            if let Ok(n) = self.notify.recv(&mut buf) {
                for line in String::from_utf8_lossy(&buf[..n]).lines() {
                    self.notifications.push(line.to_string());
                    if matches(line) {
                        return line.to_string();
                    }
                }
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "agent exited early with {status}; notifications: {:?}",
                    self.notifications
                );
            }
        }
        panic!(
            "no matching notification within {timeout:?}; got {:?}",
            self.notifications
        );
    }

    /// Drains notifications for `duration` and returns those that arrived.
    pub fn collect_notifications(&mut self, duration: Duration) -> Vec<String> {
        let deadline = Instant::now() + duration;
        let mut got = Vec::new();
        while Instant::now() < deadline {
            let mut buf = [0u8; 4096];
            if let Ok(n) = self.notify.recv(&mut buf) {
                for line in String::from_utf8_lossy(&buf[..n]).lines() {
                    got.push(line.to_string());
                }
            }
        }
        self.notifications.extend(got.iter().cloned());
        got
    }

    /// The agent's log so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The agent's process ID (for /proc readings).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `GET path` over plain HTTP/1.0: (status code, body).
    pub fn get(&self, path: &str) -> std::io::Result<(u16, String)> {
        use std::io::{Read, Write};
        let mut stream =
            std::net::TcpStream::connect_timeout(&self.listen, Duration::from_secs(2))?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
        let mut response = String::new();
        stream.read_to_string(&mut response)?;
        let code = response
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let body = response
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        Ok((code, body))
    }

    /// Polls `path` until its status is `code`; returns the body.
    pub fn wait_http(&self, path: &str, code: u16, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        let mut last = None;
        while Instant::now() < deadline {
            match self.get(path) {
                Ok((c, body)) if c == code => return body,
                other => last = Some(other),
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("{path} did not answer {code} within {timeout:?}; last: {last:?}");
    }

    pub fn signal(&self, signal: Signal) {
        kill(Pid::from_raw(self.child.id() as i32), signal).expect("signal the agent");
    }

    /// How the agent ended, if it has (a check that it is still running).
    pub fn exit_status(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("wait")
    }

    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("agent did not exit within {timeout:?}");
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The agent binary on a node without pods, against an API server double of its own without
/// the CRDs named in `absent_crds`, and the test containerd: `wait_http("/readyz")` has answered.
pub struct LoneAgent {
    pub server: apiserver_double::ApiServer,
    pub agent: AgentProcess,
    _kubeconfig: tempfile::NamedTempFile,
}

pub async fn lone_agent(absent_crds: &[&str], extra_args: &[&str]) -> LoneAgent {
    let server = apiserver_double::ApiServer::start(apiserver_double::ServerConfig {
        absent_crds: absent_crds.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    })
    .await
    .expect("server");
    let node = super::unique("node");
    server
        .store()
        .create(
            "nodes",
            serde_json::json!({"metadata": {"name": node},
                               "status": {"nodeInfo": {"kubeletVersion": "v1.33.5"}}}),
        )
        .expect("node");
    let kubeconfig = tempfile::NamedTempFile::new().expect("tempfile");
    server
        .write_kubeconfig(kubeconfig.path(), None)
        .expect("kubeconfig");
    let mut args = vec![
        "--node-name".to_string(),
        node,
        "--kubeconfig".into(),
        kubeconfig.path().display().to_string(),
        "--cri-endpoint".into(),
        super::endpoint().to_string(),
    ];
    args.extend(extra_args.iter().map(|a| a.to_string()));
    let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let agent = AgentProcess::start(&arg_refs, None);
    agent.wait_http("/readyz", 200, Duration::from_secs(60));
    LoneAgent {
        server,
        agent,
        _kubeconfig: kubeconfig,
    }
}
