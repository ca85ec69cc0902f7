//! The labels and annotations kubelet writes on CRI sandboxes and containers
//! (pkg/kubelet/kuberuntime/labels.go); the node view joins API pods to runtime objects by them.
//! What each one means, by kubelet release: `docs/cri-labels.md`.

pub const POD_NAME: &str = "io.kubernetes.pod.name";
pub const POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
pub const POD_UID: &str = "io.kubernetes.pod.uid";
pub const CONTAINER_NAME: &str = "io.kubernetes.container.name";

pub const CONTAINER_HASH: &str = "io.kubernetes.container.hash";
pub const CONTAINER_HASH_WITHOUT_RESOURCES: &str = "io.kubernetes.container.hashWithoutResources";
pub const CONTAINER_RESTART_COUNT: &str = "io.kubernetes.container.restartCount";
pub const CONTAINER_TERMINATION_MESSAGE_PATH: &str =
    "io.kubernetes.container.terminationMessagePath";
pub const CONTAINER_TERMINATION_MESSAGE_POLICY: &str =
    "io.kubernetes.container.terminationMessagePolicy";
pub const CONTAINER_PRESTOP_HANDLER: &str = "io.kubernetes.container.preStopHandler";
pub const CONTAINER_PORTS: &str = "io.kubernetes.container.ports";
pub const POD_DELETION_GRACE_PERIOD: &str = "io.kubernetes.pod.deletionGracePeriod";
pub const POD_TERMINATION_GRACE_PERIOD: &str = "io.kubernetes.pod.terminationGracePeriod";
