//! In-place resource resize (issue 9): ContainerResizeRequests handled through the kubelet
//! (`pods/resize` or the pod spec) where it resizes in place, through CRI and the pod cgroup
//! (in kubelet's order) everywhere else.

pub mod cgroup;
pub mod resources;
