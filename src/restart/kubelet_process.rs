//! When the node's kubelet process started, read from `/proc`. A kubelet that restarts keeps its
//! crash back-off entries in memory only, so it forgets them: a prediction made before its
//! restart is no longer what it will do, and restarts before its start are none of its business.

use std::path::{Path, PathBuf};

use k8s_openapi::jiff::Timestamp;

/// The kernel truncates a process's name (`comm`) to 15 bytes.
const COMM_LEN: usize = 15;

/// Finds the kubelet among the node's processes by name (`comm`).
#[derive(Clone, Debug)]
pub struct KubeletProcess {
    proc_root: PathBuf,
    name: String,
}

impl KubeletProcess {
    /// The process named `name` (as `comm` shows it: at most 15 bytes) under `proc_root`
    /// (`/proc` on a node).
    pub fn new(proc_root: impl Into<PathBuf>, name: &str) -> Self {
        let name = name.bytes().take(COMM_LEN).map(char::from).collect();
        KubeletProcess {
            proc_root: proc_root.into(),
            name,
        }
    }

    /// When the oldest process of that name started; `None` when there is none (or `/proc`
    /// cannot be read).
    pub fn started_at(&self) -> Option<Timestamp> {
        let boot = boot_time(&self.proc_root)?;
        let ticks_per_second = ticks_per_second();
        std::fs::read_dir(&self.proc_root)
            .ok()?
            .filter_map(Result::ok)
            .filter(|entry| entry.file_name().to_str().is_some_and(is_pid))
            .filter(|entry| {
                std::fs::read_to_string(entry.path().join("comm"))
                    .is_ok_and(|comm| comm.trim_end_matches('\n') == self.name)
            })
            .filter_map(|entry| {
                let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
                start_ticks(&stat)
            })
            .min()
            .and_then(|ticks| {
                let nanos = i128::from(ticks) * 1_000_000_000 / i128::from(ticks_per_second);
                let since_epoch = i128::from(boot) * 1_000_000_000 + nanos;
                Timestamp::from_nanosecond(since_epoch).ok()
            })
    }
}

fn is_pid(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_digit())
}

/// Seconds since the epoch at boot (`btime` in `/proc/stat`).
fn boot_time(proc_root: &Path) -> Option<i64> {
    std::fs::read_to_string(proc_root.join("stat"))
        .ok()?
        .lines()
        .find_map(|line| line.strip_prefix("btime "))
        .and_then(|value| value.trim().parse().ok())
}

/// The process's start time in clock ticks after boot: field 22 of `/proc/<pid>/stat`, counted
/// after the `)` that ends the name (which may itself hold spaces and parentheses).
fn start_ticks(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    // Fields from the 3rd (state) on; the start time is the 22nd.
    after_name.split_whitespace().nth(22 - 3)?.parse().ok()
}

fn ticks_per_second() -> i64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|ticks| *ticks > 0)
        .unwrap_or(100)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(root: &Path, pid: u32, comm: &str, start_ticks: u64) {
        let dir = root.join(pid.to_string());
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("comm"), format!("{comm}\n")).expect("comm");
        let fields_after_state: Vec<String> = (4..=21)
            .map(|i| i.to_string())
            .chain([start_ticks.to_string(), "123456".into(), "789".into()])
            .collect();
        std::fs::write(
            dir.join("stat"),
            format!("{pid} ({comm}) S {}\n", fields_after_state.join(" ")),
        )
        .expect("stat");
    }

    #[test]
    fn the_oldest_process_of_the_name_is_the_kubelet() {
        let root = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            root.path().join("stat"),
            "cpu  1 2 3\nbtime 1800000000\nprocesses 9\n",
        )
        .expect("stat");
        let ticks = ticks_per_second() as u64;
        process(root.path(), 10, "systemd", ticks);
        process(root.path(), 812, "kubelet", 30 * ticks);
        process(root.path(), 950, "kubelet", 90 * ticks);
        process(root.path(), 951, "kubelet-helper", 5 * ticks);
        std::fs::create_dir(root.path().join("self")).expect("not a pid");
        let kubelet = KubeletProcess::new(root.path(), "kubelet");
        assert_eq!(
            kubelet.started_at(),
            Timestamp::from_second(1_800_000_030).ok()
        );
        assert_eq!(KubeletProcess::new(root.path(), "k3s").started_at(), None);
    }

    #[test]
    fn a_name_with_spaces_and_parentheses_is_skipped_whole() {
        let stat =
            "77 (my (odd) name) S 1 77 77 0 -1 4194560 1 0 0 0 2 3 0 0 20 0 1 0 4242 1000 10";
        assert_eq!(start_ticks(stat), Some(4242));
        assert_eq!(start_ticks("garbage"), None);
        assert_eq!(start_ticks("1 (x) S 1 2"), None);
    }

    #[test]
    fn long_names_compare_as_the_kernel_cuts_them() {
        let kubelet = KubeletProcess::new("/proc", "a-very-long-kubelet-name");
        assert_eq!(kubelet.name, "a-very-long-kub");
    }

    #[test]
    fn this_machine_s_own_process_has_a_start_time() {
        // The test binary itself, found by its own name: a real /proc read.
        let comm = std::fs::read_to_string("/proc/self/comm").expect("comm");
        let started = KubeletProcess::new("/proc", comm.trim_end()).started_at();
        let now = Timestamp::now();
        assert!(started.is_some_and(|at| at <= now), "{started:?}");
    }
}
