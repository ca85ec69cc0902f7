//! The harness's promise: a cluster a test started leaves nothing on the machine once it is
//! dropped — no process, no directory, no mount, no cgroup, no address, no log link.

use std::path::{Path, PathBuf};
use std::time::Duration;

use real_cluster::{ControlPlane, ControlPlaneConfig, NEWEST, NodeConfig, RealNode, wait_until};

/// A pod that keeps running on `node`, with host network (no CNI here) and an emptyDir volume
/// (a mount of the kubelet's own).
fn pod(name: &str, node: &str) -> String {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node,
            "hostNetwork": true,
            "terminationGracePeriodSeconds": 1,
            "volumes": [{"name": "scratch", "emptyDir": {}}],
            "containers": [{
                "name": "app",
                "image": "localhost/busybox:local",
                "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.1; done"],
                "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
            }],
        },
    })
    .to_string()
}

/// Processes (other than this one) whose command line names any of `paths`.
fn processes_naming(paths: &[PathBuf]) -> Vec<String> {
    let me = std::process::id().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().filter_map(Result::ok) {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.chars().all(|c| c.is_ascii_digit()) || pid == me {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if paths
            .iter()
            .any(|p| cmdline.contains(p.to_string_lossy().as_ref()))
        {
            found.push(format!("{pid}: {cmdline}"));
        }
    }
    found
}

fn mounts_under(paths: &[PathBuf]) -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|line| line.split(' ').nth(4).map(str::to_string))
        .filter(|point| paths.iter().any(|p| Path::new(point).starts_with(p)))
        .collect()
}

fn cgroups_named(roots: &[String]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for hierarchy in std::fs::read_dir("/sys/fs/cgroup")
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .chain([PathBuf::from("/sys/fs/cgroup")])
    {
        for root in roots {
            if hierarchy.join(root).exists() {
                found.push(hierarchy.join(root));
            }
        }
    }
    found
}

fn loopback_addresses() -> String {
    let output = std::process::Command::new("ip")
        .args(["-o", "address", "show", "dev", "lo"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn log_links_into(paths: &[PathBuf]) -> Vec<PathBuf> {
    std::fs::read_dir("/var/log/containers")
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| {
                    std::fs::read_link(e.path())
                        .is_ok_and(|target| paths.iter().any(|p| target.starts_with(p)))
                })
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the real Kubernetes binaries: run tests/run-all.sh"]
async fn a_two_node_cluster_with_running_pods_leaves_nothing_behind() {
    let cluster = ControlPlane::start(ControlPlaneConfig::new(NEWEST))
        .await
        .unwrap();
    let mut nodes = Vec::new();
    for name in ["node-a", "node-b"] {
        nodes.push(
            RealNode::start(&cluster, NodeConfig::new(name, NEWEST))
                .await
                .unwrap(),
        );
    }
    wait_until(
        "the default ServiceAccount",
        Duration::from_secs(60),
        || {
            let found = cluster.kubectl_run(&["get", "serviceaccount", "default"]);
            async move { Ok(found.ok().map(|_| ())) }
        },
    )
    .await
    .unwrap();
    for node in &nodes {
        let file = cluster.dir().join(format!("pod-{}.json", node.name));
        std::fs::write(&file, pod(&format!("keep-{}", node.name), &node.name)).unwrap();
        cluster
            .kubectl_run(&["create", &format!("-f={}", file.display())])
            .unwrap();
    }
    for node in &nodes {
        let name = format!("keep-{}", node.name);
        wait_until(&format!("{name} running"), Duration::from_secs(90), || {
            let phase = cluster.kubectl_run(&["get", "pod", &name, "-o=jsonpath={.status.phase}"]);
            async move { Ok(phase.ok().filter(|p| p == "Running").map(|_| ())) }
        })
        .await
        .unwrap();
    }

    // What the cluster holds now, each a thing the drop must undo.
    let bases: Vec<PathBuf> = nodes
        .iter()
        .map(|n| n.kubelet_cert_dir().parent().unwrap().to_path_buf())
        .collect();
    let mut paths = bases.clone();
    paths.push(cluster.dir().to_path_buf());
    let roots: Vec<String> = nodes.iter().map(|n| n.cgroup_root().to_string()).collect();
    let ips: Vec<String> = nodes.iter().map(|n| format!("{}/32", n.ip)).collect();
    // The checks below must see each of these while the cluster runs, or they prove nothing.
    assert!(
        processes_naming(&paths).len() >= 5,
        "{:#?}",
        processes_naming(&paths)
    );
    assert!(!mounts_under(&bases).is_empty(), "the pods' mounts");
    assert_eq!(cgroups_named(&roots).len() % roots.len(), 0);
    assert!(!cgroups_named(&roots).is_empty());
    assert!(
        ips.iter()
            .all(|ip| loopback_addresses().contains(ip.as_str()))
    );
    assert!(
        !log_links_into(&bases).is_empty(),
        "the kubelets' log links"
    );

    drop(nodes);
    drop(cluster);

    let left = processes_naming(&paths);
    assert!(left.is_empty(), "processes left: {left:#?}");
    let mounts = mounts_under(&paths);
    assert!(mounts.is_empty(), "mounts left: {mounts:#?}");
    let cgroups = cgroups_named(&roots);
    assert!(cgroups.is_empty(), "cgroups left: {cgroups:#?}");
    let addresses = loopback_addresses();
    for ip in &ips {
        assert!(
            !addresses.contains(ip.as_str()),
            "{ip} left on lo: {addresses}"
        );
    }
    let links = log_links_into(&paths);
    assert!(links.is_empty(), "log links left: {links:#?}");
    if std::env::var_os("INPLACED_TEST_KEEP_CLUSTER").is_none() {
        for path in &paths {
            assert!(!path.exists(), "{} left", path.display());
        }
    }
}
