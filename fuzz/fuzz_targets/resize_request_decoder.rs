//! A ContainerResizeRequest from the API, whatever its content, must never panic the agent:
//! decoding takes any JSON; for a request that validates, the checks against a pod (QoS,
//! LimitRange, allocatable), the CRI values and the pod cgroup values are computed without
//! panicking, and a request that passes the checks never asks for a request above its limit.
#![no_main]

use inplaced::resize::request::ResizeRequest;
use inplaced::resize::resources::{
    self, check_resize, cri_resources, pod_cgroup_config, qos_class,
};
use inplaced::resources::Resources;
use libfuzzer_sys::fuzz_target;
use serde_json::json;

fuzz_target!(|data: &[u8]| {
    // The watch hands the agent API objects: what does not parse as one never reaches it.
    let Ok(object) = serde_json::from_slice::<kube::core::DynamicObject>(data) else {
        return;
    };
    let Ok(request) = ResizeRequest::from_object(&object) else {
        return;
    };
    let pod = [(
        "app".to_string(),
        Resources {
            cpu_request: Some(100),
            cpu_limit: Some(200),
            memory_request: Some(32 << 20),
            memory_limit: Some(64 << 20),
        },
    )];
    let mut after = pod.clone();
    for desired in request.desired() {
        if let Some((_, r)) = after.iter_mut().find(|(n, _)| *n == desired.name) {
            *r = r.overlay(&desired.resources);
        }
    }
    let allocatable = Resources {
        cpu_request: Some(2000),
        memory_request: Some(1 << 30),
        ..Default::default()
    };
    let limit_range = json!({"metadata": {"name": "lr"}, "spec": {"limits": [
        {"type": "Container", "max": {"cpu": "4", "memory": "8Gi"}, "min": {"cpu": "1m"},
         "maxLimitRequestRatio": {"cpu": "10"}},
        {"type": "Pod", "max": {"cpu": "8"}}]}});
    let ok = check_resize(&pod, &after, &allocatable, &[limit_range]).is_ok();
    let all: Vec<Resources> = after.iter().map(|(_, r)| *r).collect();
    let _ = pod_cgroup_config(&all, qos_class(&all));
    for (_, r) in &after {
        let cri = cri_resources(r);
        let _ = resources::from_cri(&cri);
        let _ = r.to_requirements();
        if ok {
            assert!(r.cpu_request <= r.cpu_limit || r.cpu_limit.is_none());
            assert!(r.memory_request <= r.memory_limit || r.memory_limit.is_none());
        }
    }
});
