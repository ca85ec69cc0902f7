//! What the agent's upgrade answer costs on a node of 250 pods of three containers (the
//! node_scale shape): the digest it computes on every node-view rebuild (`fingerprint`), and the
//! answer for two targets it computes when the digest changed (`summarize`: the container hash
//! of every container under each target, and the checkpoint files). The containers' stored hashes
//! are kubelet 1.30's, so that 1.31 restarts some (the expensive path is taken).
//!
//!     cargo bench -p inplaced --bench upgrade_summary

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use inplaced::cri::labels;
use inplaced::cri::proto::{Container, ContainerState};
use inplaced::hashing::{self, KubeletVersion};
use inplaced::kube::CachedPod;
use inplaced::nodeview::{self, NodeView, RuntimeSnapshot};
use inplaced::upgrade;

const PODS: usize = 250;
const CONTAINERS: usize = 3;

fn view() -> NodeView {
    let stored_by = KubeletVersion::parse("1.30.7").expect("release");
    let mut pods = Vec::new();
    let mut containers = Vec::new();
    for p in 0..PODS {
        let uid = format!("uid-{p}");
        let specs: Vec<serde_json::Value> = (0..CONTAINERS)
            .map(|c| {
                serde_json::json!({
                    "name": format!("c{c}"),
                    "image": format!("registry.example/app{c}:1.{p}"),
                    "command": ["/bin/app", "--port", "8080"],
                    "env": [{"name": "MODE", "value": "prod"}],
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                                  "limits": {"cpu": "200m", "memory": "128Mi"}},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                })
            })
            .collect();
        for (c, spec) in specs.iter().enumerate() {
            let hash = hashing::hash_container(
                spec.to_string().as_bytes(),
                &stored_by,
                &Default::default(),
            )
            .expect("hash");
            containers.push(Arc::new(Container {
                id: format!("{p:04}{c}"),
                state: ContainerState::ContainerRunning as i32,
                labels: [
                    (labels::POD_UID.to_owned(), uid.clone()),
                    (labels::CONTAINER_NAME.to_owned(), format!("c{c}")),
                ]
                .into(),
                annotations: [(
                    labels::CONTAINER_HASH.to_owned(),
                    hashing::format_hash(hash.hash),
                )]
                .into(),
                ..Default::default()
            }));
        }
        let pod: CachedPod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("p{p}"), "namespace": "ns", "uid": uid,
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                              "name": format!("rs{}", p % 25), "uid": "o", "controller": true}]},
            "spec": {"containers": specs},
            "status": {"phase": "Running"},
        }))
        .expect("pod");
        pods.push(Arc::new(pod));
    }
    let snapshot = RuntimeSnapshot {
        containers,
        ..Default::default()
    };
    let mut view = nodeview::join("node", &pods, &snapshot);
    view.kubelet_version = Some("v1.30.7".into());
    view.synced = true;
    view
}

fn bench(c: &mut Criterion) {
    let view = view();
    let targets = upgrade::default_targets(view.kubelet_version.as_deref());
    let root = tempfile::tempdir().expect("kubelet root");
    let answer = upgrade::summarize(&view, &targets, root.path());
    assert!(answer[0].restart > 0, "1.31 restarts some: {answer:?}");
    let mut group = c.benchmark_group("upgrade_summary_250_pods");
    group.bench_function("fingerprint", |b| {
        b.iter(|| upgrade::fingerprint(black_box(&view), &targets, root.path()))
    });
    group.bench_function("summarize_two_targets", |b| {
        b.iter(|| upgrade::summarize(black_box(&view), &targets, root.path()))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
