//! The kubectl plugin's krew release (packaging/krew/make-release.sh, which
//! packaging/build-packages.sh runs on the release binary): the archive and the manifest it
//! writes, then the real krew (v0.4.3, built from tests/kube/k8s-tools) installing the plugin
//! from them and the real kubectl running it as `kubectl inplaced`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use real_cluster::{Binaries, NEWEST};
use serde_json::{Value, json};

const VERSION: &str = env!("CARGO_PKG_VERSION");

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn archive_name() -> String {
    format!("inplaced-{VERSION}-linux-amd64.tar.gz")
}

/// make-release.sh on the debug binary into `out`, with INPLACED_RELEASE_URL as given.
fn make_release(out: &Path, url: Option<&str>) -> (PathBuf, PathBuf) {
    let mut command = Command::new(repo().join("packaging/krew/make-release.sh"));
    command.arg(env!("CARGO_BIN_EXE_inplaced")).arg(out);
    match url {
        Some(url) => command.env("INPLACED_RELEASE_URL", url),
        None => command.env_remove("INPLACED_RELEASE_URL"),
    };
    let said = command.output().unwrap();
    assert!(
        said.status.success(),
        "make-release.sh: {}",
        String::from_utf8_lossy(&said.stderr)
    );
    (out.join(archive_name()), out.join("inplaced.krew.yaml"))
}

fn sha256(file: &Path) -> String {
    let out = Command::new("sha256sum").arg(file).output().unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

fn manifest(path: &Path) -> Value {
    serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn the_release_archive_holds_the_binary_and_the_manifest_names_its_digest() {
    let out = tempfile::tempdir().unwrap();
    let (archive, manifest_path) = make_release(out.path(), Some("https://example.test/rel/"));

    // The binary as built, and the licence or README beside it.
    let listing = Command::new("tar")
        .arg("-tzvf")
        .arg(&archive)
        .output()
        .unwrap();
    assert!(listing.status.success(), "{}", text(&listing));
    let listing = String::from_utf8_lossy(&listing.stdout);
    let names: Vec<&str> = listing
        .lines()
        .map(|l| l.split_whitespace().last().unwrap())
        .collect();
    let beside = if repo().join("LICENSE").exists() {
        "LICENSE"
    } else {
        "README.md"
    };
    assert_eq!(names, [beside, "inplaced"], "{listing}");
    let unpacked = out.path().join("unpacked");
    std::fs::create_dir(&unpacked).unwrap();
    let status = Command::new("tar")
        .arg("-xzf")
        .arg(&archive)
        .arg("-C")
        .arg(&unpacked)
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(
        std::fs::read(unpacked.join("inplaced")).unwrap(),
        std::fs::read(env!("CARGO_BIN_EXE_inplaced")).unwrap()
    );

    // The manifest: krew's Plugin kind, the crate's version, this archive's digest and address.
    let plugin = manifest(&manifest_path);
    assert_eq!(
        plugin["apiVersion"],
        json!("krew.googlecontainertools.github.com/v1alpha2")
    );
    assert_eq!(plugin["kind"], json!("Plugin"));
    assert_eq!(plugin["metadata"]["name"], json!("inplaced"));
    assert_eq!(plugin["spec"]["version"], json!(format!("v{VERSION}")));
    let platforms = plugin["spec"]["platforms"].as_array().unwrap();
    assert_eq!(platforms.len(), 1);
    let platform = &platforms[0];
    assert_eq!(
        platform["selector"]["matchLabels"],
        json!({"os": "linux", "arch": "amd64"})
    );
    assert_eq!(platform["bin"], json!("inplaced"));
    assert_eq!(platform["sha256"], json!(sha256(&archive)));
    assert_eq!(
        platform["uri"],
        json!(format!("https://example.test/rel//{}", archive_name()))
    );

    // Made twice, the same bytes (a release can be rebuilt and keep its digest).
    let again = tempfile::tempdir().unwrap();
    let (archive_again, _) = make_release(again.path(), None);
    assert_eq!(sha256(&archive_again), sha256(&archive));
    let default = manifest(&again.path().join("inplaced.krew.yaml"));
    let uri = default["spec"]["platforms"][0]["uri"].as_str().unwrap();
    assert!(
        uri.starts_with("https://") && uri.ends_with(&format!("/{}", archive_name())),
        "the default address: {uri}"
    );
}

/// krew with its root in `root` (no update check: nothing leaves the machine).
fn krew(root: &Path) -> Command {
    let krew = Binaries::tools()
        .and_then(|tools| tools.path("krew"))
        .unwrap_or_else(|e| panic!("{e:#}"));
    let mut command = Command::new(krew);
    command
        .env("KREW_ROOT", root)
        .env("KREW_NO_UPGRADE_CHECK", "1")
        .env("HOME", root)
        .stdin(Stdio::null());
    command
}

/// An empty local plugin index (a git repository without plugins, where `krew update` would
/// clone krew-index): `krew list` and `krew uninstall` refuse to run without one; `krew install
/// --manifest` needs none.
fn empty_index(root: &Path) {
    let index = root.join("index/default");
    std::fs::create_dir_all(&index).unwrap();
    let status = Command::new("git")
        .args(["init", "-q"])
        .arg(&index)
        .status()
        .unwrap();
    assert!(status.success(), "git init {}", index.display());
}

#[test]
#[ignore = "needs root and the real Kubernetes binaries: run tests/run-all.sh"]
fn krew_installs_the_release_and_kubectl_runs_it_as_the_plugin() {
    let out = tempfile::tempdir().unwrap();
    let (archive, manifest_path) = make_release(out.path(), None);
    let root = out.path().join("krew");

    // An archive whose digest is not the manifest's is refused: krew checks it.
    let tampered = out.path().join("tampered.tar.gz");
    let mut bytes = std::fs::read(&archive).unwrap();
    bytes.push(0);
    std::fs::write(&tampered, bytes).unwrap();
    let refused = krew(&root)
        .arg("install")
        .arg(format!("--manifest={}", manifest_path.display()))
        .arg(format!("--archive={}", tampered.display()))
        .output()
        .unwrap();
    assert!(!refused.status.success(), "{}", text(&refused));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("checksum does not match"),
        "{}",
        text(&refused)
    );
    assert!(
        !root.join("bin/kubectl-inplaced").exists(),
        "a refused install left its link"
    );

    let installed = krew(&root)
        .arg("install")
        .arg(format!("--manifest={}", manifest_path.display()))
        .arg(format!("--archive={}", archive.display()))
        .output()
        .unwrap();
    assert!(installed.status.success(), "{}", text(&installed));
    let link = root.join("bin/kubectl-inplaced");
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink(),
        "{}",
        link.display()
    );
    empty_index(&root);
    let listed = krew(&root).arg("list").output().unwrap();
    assert!(listed.status.success(), "{}", text(&listed));
    assert!(
        String::from_utf8_lossy(&listed.stdout)
            .lines()
            // A plugin from a manifest is of no index: krew lists it as "detached/inplaced".
            .any(|l| l.split_whitespace().next() == Some("detached/inplaced")),
        "{}",
        text(&listed)
    );

    // kubectl finds the plugin on the PATH, as krew tells users to set it.
    let kubectl = Binaries::of(NEWEST)
        .and_then(|b| b.path("kubectl"))
        .unwrap_or_else(|e| panic!("{e:#}"));
    let path = format!(
        "{}:{}",
        root.join("bin").display(),
        kubectl.parent().unwrap().display()
    );
    let version = Command::new(&kubectl)
        .args(["inplaced", "--version"])
        .env("PATH", &path)
        .env("HOME", out.path())
        .output()
        .unwrap();
    assert!(version.status.success(), "{}", text(&version));
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("inplaced {VERSION}")
    );
    // Started as the plugin, the binary names itself so in its help.
    let help = Command::new(&kubectl)
        .args(["inplaced", "--help"])
        .env("PATH", &path)
        .env("HOME", out.path())
        .output()
        .unwrap();
    assert!(help.status.success(), "{}", text(&help));
    assert!(
        String::from_utf8_lossy(&help.stdout).contains("kubectl inplaced"),
        "{}",
        text(&help)
    );
    let plugins = Command::new(&kubectl)
        .args(["plugin", "list"])
        .env("PATH", &path)
        .env("HOME", out.path())
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&plugins.stdout).contains("kubectl-inplaced"),
        "{}",
        text(&plugins)
    );

    let removed = krew(&root)
        .args(["uninstall", "inplaced"])
        .output()
        .unwrap();
    assert!(removed.status.success(), "{}", text(&removed));
    assert!(std::fs::symlink_metadata(&link).is_err(), "the link stays");
}
