//! A component as a child process in a process group of its own, its output in a log file;
//! ended (SIGTERM to the group, SIGKILL after a grace period) when dropped.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

pub struct Component {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Component {
    /// Starts `command` with stdout and stderr appended to `log`.
    pub fn spawn(name: &str, mut command: Command, log: &Path) -> anyhow::Result<Component> {
        let out = File::options()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("{}", log.display()))?;
        let err = out.try_clone()?;
        command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        let child = command
            .spawn()
            .with_context(|| format!("starting {name} ({:?})", command.get_program()))?;
        Ok(Component {
            name: name.to_string(),
            child,
            log: log.to_path_buf(),
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// An [`Exited`] error with the log's last lines when the component has exited.
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            return Err(Exited(format!(
                "{} exited ({status}); its log ends:\n{}",
                self.name,
                self.log_tail(40)
            ))
            .into());
        }
        Ok(())
    }

    /// The last `lines` lines of the component's log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Ends the component: SIGTERM to its process group, SIGKILL after `grace`.
    pub fn stop(&mut self, grace: Duration) -> Option<ExitStatus> {
        if let Ok(Some(status)) = self.child.try_wait() {
            return Some(status);
        }
        let group = Pid::from_raw(self.child.id() as i32);
        let _ = killpg(group, Signal::SIGTERM);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = killpg(group, Signal::SIGKILL);
        self.child.wait().ok()
    }

    /// Polls `check` as [`wait_until`] does while this component runs: fails at once when it
    /// exits, and after `timeout` with the last lines of its log.
    pub async fn wait_for<T, F, Fut>(
        &mut self,
        what: &str,
        timeout: Duration,
        mut check: F,
    ) -> anyhow::Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
    {
        let result = wait_until(what, timeout, || {
            let running = self.check_running();
            let next = check();
            async move {
                running?;
                next.await
            }
        })
        .await;
        result.map_err(|e| {
            if e.is::<Exited>() {
                e
            } else {
                anyhow::anyhow!("{e:#}\n{}'s log ends:\n{}", self.name, self.log_tail(30))
            }
        })
    }

    /// Kills the component at once (SIGKILL to its group), as a crash would.
    pub fn kill(&mut self) {
        let _ = killpg(Pid::from_raw(self.child.id() as i32), Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

impl Drop for Component {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(10));
    }
}

/// A component that has exited: waiting on it any longer is pointless.
#[derive(Debug)]
pub struct Exited(pub String);

impl std::fmt::Display for Exited {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Exited {}

/// Polls `check` every 200 ms until it answers `Some`, failing after `timeout` with `what` and
/// the last error it returned; at once when that error is [`Exited`].
pub async fn wait_until<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    let mut last = None;
    loop {
        match check().await {
            Ok(Some(found)) => return Ok(found),
            Ok(None) => {}
            Err(e) if e.is::<Exited>() => return Err(e.context(what.to_string())),
            Err(e) => last = Some(e),
        }
        if Instant::now() >= deadline {
            match last {
                Some(e) => bail!("{what}: not within {timeout:?}; last error: {e:#}"),
                None => bail!("{what}: not within {timeout:?}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
