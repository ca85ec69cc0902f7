//! `kubectl inplaced` wherever the binary is, as a workstation has it (nothing in /usr/bin): the
//! packages' launcher beside the binary or with the binary only on the PATH, and krew's way (a
//! link named kubectl-inplaced to the binary). Each answers `upgrade-check` with the fleet's
//! answer, read from an API server; the node-local check would ask a CRI socket instead.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use apiserver_double::{ApiServer, ServerConfig};
use serde_json::Value;

const LAUNCHER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/packaging/kubectl-inplaced");

/// A directory holding `kubectl-inplaced` as `how` installs it; the PATH to run it with.
enum Install {
    /// The launcher with the binary beside it (the packages, or both copied to ~/bin).
    LauncherBeside,
    /// The launcher alone; the binary elsewhere on the PATH.
    LauncherWithBinaryOnPath,
    /// krew: a link named kubectl-inplaced to the binary.
    KrewLink,
}

fn install(how: Install, root: &Path) -> (PathBuf, String) {
    let plugin_dir = root.join("plugin");
    let elsewhere = root.join("elsewhere");
    std::fs::create_dir_all(&plugin_dir).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    let binary = Path::new(env!("CARGO_BIN_EXE_inplaced"));
    let plugin = plugin_dir.join("kubectl-inplaced");
    match how {
        Install::LauncherBeside => {
            std::fs::copy(LAUNCHER, &plugin).unwrap();
            std::os::unix::fs::symlink(binary, plugin_dir.join("inplaced")).unwrap();
        }
        Install::LauncherWithBinaryOnPath => {
            std::fs::copy(LAUNCHER, &plugin).unwrap();
            std::os::unix::fs::symlink(binary, elsewhere.join("inplaced")).unwrap();
        }
        Install::KrewLink => std::os::unix::fs::symlink(binary, &plugin).unwrap(),
    }
    // Never the machine's own /usr/bin/inplaced: only these two directories and the system's.
    let path = format!(
        "{}:{}:/usr/sbin:/sbin:/bin",
        plugin_dir.display(),
        elsewhere.display()
    );
    (plugin, path)
}

fn run(plugin: &Path, path: &str, args: &[&str]) -> Output {
    Command::new(plugin)
        .args(args)
        .env("PATH", path)
        .env_remove("KUBECONFIG")
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_inplaced_runs_the_binary_wherever_it_is_and_answers_for_the_fleet() {
    let server = ApiServer::start(ServerConfig::default()).await.unwrap();
    let work = tempfile::tempdir().unwrap();
    let kubeconfig = work.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig, None).unwrap();
    for (name, how) in [
        ("launcher beside", Install::LauncherBeside),
        (
            "launcher, binary on PATH",
            Install::LauncherWithBinaryOnPath,
        ),
        ("krew link", Install::KrewLink),
    ] {
        let root = work.path().join(name.replace([' ', ','], "-"));
        let (plugin, path) = install(how, &root);
        let version = run(&plugin, &path, &["--version"]);
        assert!(version.status.success(), "{name}: {version:?}");
        assert_eq!(
            String::from_utf8_lossy(&version.stdout).trim(),
            format!("inplaced {}", env!("CARGO_PKG_VERSION")),
            "{name}"
        );
        let help = run(&plugin, &path, &["restart", "--help"]);
        assert!(
            String::from_utf8_lossy(&help.stdout).contains("Usage: kubectl inplaced restart"),
            "{name}: the help names the plugin: {}",
            String::from_utf8_lossy(&help.stdout)
        );
        let answer = run(
            &plugin,
            &path,
            &[
                "upgrade-check",
                "--to",
                "1.36",
                "-o",
                "json",
                "--kubeconfig",
                kubeconfig.to_str().unwrap(),
            ],
        );
        assert!(
            answer.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&answer.stderr)
        );
        let answer: Value = serde_json::from_slice(&answer.stdout).unwrap();
        assert_eq!(answer["nodes"], serde_json::json!([]), "{name}: {answer:#}");
    }
}

#[test]
fn the_launcher_says_so_when_there_is_no_binary() {
    let work = tempfile::tempdir().unwrap();
    let plugin = work.path().join("kubectl-inplaced");
    std::fs::copy(LAUNCHER, &plugin).unwrap();
    let out = run(&plugin, "/usr/sbin:/sbin:/bin", &["--version"]);
    assert_eq!(out.status.code(), Some(127));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no inplaced binary"),
        "{out:?}"
    );
}
