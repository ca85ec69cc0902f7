//! docs/install.md's commands for a node's certificate, run as written against a real control
//! plane: the kubeconfig they make authenticates as the dedicated identity of that node, which the
//! shipped role grants what the agent needs.

mod support;

use std::path::Path;

use real_cluster::{ControlPlane, ControlPlaneConfig, NEWEST};
use serde_json::Value;
use support::real::*;

/// The `sh` block of docs/install.md that follows `marker`.
fn documented_block(marker: &str) -> String {
    let install =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/install.md"))
            .unwrap();
    let after = &install[install.find(marker).expect("the marker in docs/install.md")..];
    let start = after.find("```sh\n").unwrap() + "```sh\n".len();
    let end = start + after[start..].find("```").unwrap();
    after[start..end].to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the real Kubernetes binaries: run tests/run-all.sh"]
async fn install_mds_certificate_commands_make_a_working_dedicated_kubeconfig() {
    // The controller-manager signs kubernetes.io/kube-apiserver-client CSRs with the cluster CA.
    let mut config = ControlPlaneConfig::new(NEWEST).with_kubelet_certificate_rotation();
    config
        .controllers
        .retain(|c| c != "certificatesigningrequest-approving-controller");
    let cluster = ControlPlane::start(config).await.unwrap();
    apply_shipped(&cluster, "rbac-dedicated.yaml");
    let work = tempfile::tempdir().unwrap();
    let ca = work.path().join("ca.crt");
    std::fs::write(&ca, cluster.ca.cert_pem()).unwrap();
    // The reader's own values replace the example's three assignments.
    let block = documented_block("tests/real_kube_install.rs runs this block");
    let mut script = format!(
        "set -eu\nNODE=node-7\nAPISERVER={}\nCA={}\n",
        cluster.url,
        ca.display()
    );
    let mut replaced = 0;
    for line in block.lines() {
        if ["NODE=", "APISERVER=", "CA="]
            .iter()
            .any(|v| line.starts_with(v))
        {
            replaced += 1;
            continue;
        }
        script.push_str(line);
        script.push('\n');
    }
    assert_eq!(
        replaced, 3,
        "the block sets NODE, APISERVER and CA:\n{block}"
    );
    let kubectl = real_cluster::Binaries::of(NEWEST)
        .unwrap()
        .path("kubectl")
        .unwrap();
    let path = format!(
        "{}:{}",
        kubectl.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let output = std::process::Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(work.path())
        .env("PATH", path)
        .env("KUBECONFIG", cluster.admin_kubeconfig())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "the documented commands failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );

    // Who the new kubeconfig is, as the API server sees it.
    let made = work.path().join("node-7.kubeconfig");
    let run = |args: &[&str]| {
        let out = std::process::Command::new(&kubectl)
            .arg(format!("--kubeconfig={}", made.display()))
            .args(args)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).trim().to_string(),
        )
    };
    let (ok, whoami) = run(&["auth", "whoami", "-o", "json"]);
    assert!(ok, "kubectl auth whoami with the new kubeconfig");
    let review: Value = serde_json::from_str(&whoami).unwrap();
    let user = &review["status"]["userInfo"];
    assert_eq!(user["username"], "inplaced:node:node-7", "{review:#}");
    assert!(
        user["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g == "inplaced:agents"),
        "{review:#}"
    );
    // What the shipped role grants it, and what it does not.
    assert_eq!(run(&["auth", "can-i", "list", "pods", "-A"]).1, "yes");
    assert_eq!(
        run(&[
            "auth",
            "can-i",
            "patch",
            "containerrestartrequests.inplaced.io",
            "--subresource=status",
            "-A"
        ])
        .1,
        "yes"
    );
    assert_eq!(run(&["auth", "can-i", "get", "secrets", "-A"]).1, "no");
}
