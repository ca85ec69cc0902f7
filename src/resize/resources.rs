//! Kubernetes resources ↔ CRI resources, QoS classes and the checks a resize must pass.
