//! The standalone binary: listens, writes a kubeconfig a client can use.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

#[tokio::test]
async fn binary_serves_and_writes_kubeconfig() {
    let dir = std::env::temp_dir().join(format!("apiserver-double-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    let _ = std::fs::remove_file(&kubeconfig);
    let child = Command::new(env!("CARGO_BIN_EXE_apiserver-double"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--token",
            "t=alice",
            "--kubeconfig-token",
            "t",
        ])
        .arg("--kubeconfig-out")
        .arg(&kubeconfig)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Stops only the child this test started, even if an assertion below panics.
    let _guard = KillOnDrop(child);
    let result = async {
        for _ in 0..100 {
            if kubeconfig.exists() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let kc = Kubeconfig::read_from(&kubeconfig).expect("kubeconfig written");
        let cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .unwrap();
        let nodes: Api<Node> = Api::all(kube::Client::try_from(cfg).unwrap());
        let node: Node = common::typed(serde_json::json!({"metadata": {"name": "n1"}}));
        nodes.create(&PostParams::default(), &node).await.unwrap();
        nodes.get("n1").await.unwrap()
    }
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(result.metadata.name.as_deref(), Some("n1"));
}

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
