//! In-place resource resize (issue 9): ContainerResizeRequests handled through the kubelet
//! (`pods/resize` or the pod spec) where it resizes in place, through CRI and the pod cgroup
//! (in kubelet's order) everywhere else.

pub mod cgroup;
pub mod cli;
mod controller;
mod metrics;
pub mod object;
mod plan;
pub mod resources;
mod slice_unit;
pub(crate) mod through_cri;
pub mod through_kubelet;

pub use controller::{ResizeConfig, resize_resource, run};
pub(crate) use metrics::ResizeMetrics;
pub use through_kubelet::ActuatorSetting;
