//! Small helpers shared by the stand-ins, the binary and the tests.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// The test containerd: `$INPLACED_TEST_CRI_ENDPOINT`, else `tests/node/containerd.sh`'s default.
pub fn test_cri_endpoint() -> String {
    std::env::var("INPLACED_TEST_CRI_ENDPOINT")
        .unwrap_or_else(|_| "unix:///run/inplaced-test/containerd.sock".into())
}

/// The cgroup parent of test pods (removed wholesale by `containerd.sh down`).
pub fn test_cgroup_root() -> String {
    std::env::var("INPLACED_TEST_CGROUP_ROOT").unwrap_or_else(|_| "inplaced-test".into())
}

/// Whether test pods get systemd slices (`$INPLACED_TEST_CGROUP_DRIVER=systemd`, the VM of
/// tests/vm) or cgroupfs directories under [`test_cgroup_root`] (default).
pub fn test_cgroup_driver_is_systemd() -> bool {
    std::env::var("INPLACED_TEST_CGROUP_DRIVER").is_ok_and(|d| d == "systemd")
}

/// A random RFC 4122 UUID from the kernel (no RNG crate needed).
pub fn new_uid() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/uuid")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| {
            let n = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos();
            format!(
                "{:08x}-0000-4000-8000-{:012x}",
                n as u32,
                (n >> 32) as u64 & 0xffff_ffff_ffff
            )
        })
}

/// `prefix-xxxxxxxx`: a DNS-safe unique name, so parallel tests never collide.
pub fn unique_name(prefix: &str) -> String {
    let uid = new_uid();
    format!("{prefix}-{}", &uid[..8])
}

/// How long a stand-in request may wait for the head of its answer. A request sent during an
/// API outage was seen never to be answered (a pod status patch, in `fault_api_e2e`), which
/// wedged that pod's worker for good; bounded, it fails and the next sync sends it again, as
/// kubelet would. Watch streams answer at once and their bodies are not bounded by it.
const ANSWER_DEADLINE: Duration = Duration::from_secs(15);

/// A kube client for a kubeconfig document (YAML or JSON text).
pub async fn kube_client(kubeconfig: &str) -> anyhow::Result<kube::Client> {
    let kc = Kubeconfig::from_yaml(kubeconfig).context("parsing kubeconfig")?;
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .context("loading kubeconfig")?;
    cfg.read_timeout = Some(Duration::from_secs(300));
    let builder = kube::client::ClientBuilder::try_from(cfg).context("building kube client")?;
    Ok(builder
        .with_layer(&tower::timeout::TimeoutLayer::new(ANSWER_DEADLINE))
        .build())
}

/// RFC 3339 with second precision, as the API server serialises `metav1.Time`.
pub fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

pub fn now_rfc3339() -> String {
    rfc3339(SystemTime::now())
}

/// A CRI timestamp (nanoseconds since the epoch) as RFC 3339; `None` for 0 (unset).
pub fn nanos_rfc3339(nanos: i64) -> Option<String> {
    (nanos > 0).then(|| rfc3339(UNIX_EPOCH + Duration::from_nanos(nanos as u64)))
}

pub fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    humantime::parse_rfc3339_weak(text).ok()
}

/// Adds the tag `target` to the local image `source` in containerd's `k8s.io` namespace
/// (`ctr images tag --force`): no registry is reachable here, so images the tests name
/// (a second busybox tag, the images of golden containers) are aliases of the local busybox.
pub async fn tag_image(cri_endpoint: &str, source: &str, target: &str) -> anyhow::Result<()> {
    let socket = cri_endpoint.strip_prefix("unix://").unwrap_or(cri_endpoint);
    let out = tokio::process::Command::new("ctr")
        .args([
            "--address",
            socket,
            "-n",
            "k8s.io",
            "images",
            "tag",
            "--force",
        ])
        .args([source, target])
        .output()
        .await
        .context("running ctr")?;
    anyhow::ensure!(
        out.status.success(),
        "ctr images tag {source} {target}: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

/// The fully qualified reference containerd stores for an image name (`nginx:1` →
/// `docker.io/library/nginx:1`), so that a tag made with `ctr` is found by CRI lookups.
pub fn normalize_image(image: &str) -> String {
    let (name, has_tag) = match image.rsplit_once('/') {
        Some((_, last)) => (image, last.contains(':') || last.contains('@')),
        None => (image, image.contains(':') || image.contains('@')),
    };
    let first = name.split('/').next().unwrap_or("");
    let qualified = if !name.contains('/') {
        format!("docker.io/library/{name}")
    } else if first.contains('.') || first.contains(':') || first == "localhost" {
        name.to_owned()
    } else {
        format!("docker.io/{name}")
    };
    if has_tag {
        qualified
    } else {
        format!("{qualified}:latest")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_like_containerd() {
        assert_eq!(
            normalize_image("nginx:1.14.2"),
            "docker.io/library/nginx:1.14.2"
        );
        assert_eq!(
            normalize_image("busybox"),
            "docker.io/library/busybox:latest"
        );
        assert_eq!(
            normalize_image("grafana/grafana:10"),
            "docker.io/grafana/grafana:10"
        );
        assert_eq!(
            normalize_image("registry.k8s.io/pause:3.9"),
            "registry.k8s.io/pause:3.9"
        );
        assert_eq!(
            normalize_image("localhost/busybox:v2"),
            "localhost/busybox:v2"
        );
    }

    #[test]
    fn unique_names_are_dns_safe() {
        let a = unique_name("p");
        assert!(a.starts_with("p-") && a.len() == 10, "{a}");
        assert_ne!(a, unique_name("p"));
    }
}
