//! The kubelet's config file (a KubeletConfiguration, YAML or JSON), read for the few fields the
//! agent follows: feature gates (resize, crash back-off) and the crash back-off's cap. A file
//! that cannot be read or parsed says nothing, and callers fall back to the release's defaults.

use std::path::Path;

use serde_json::Value;

/// The file as a JSON value; None when it cannot be read or parsed.
pub(crate) fn read(path: &Path) -> Option<Value> {
    let text = std::fs::read_to_string(path).ok()?;
    serde_yaml_ng::from_str(&text).ok()
}

/// `featureGates.<name>` of a config read with [`read`].
pub(crate) fn gate(config: &Value, name: &str) -> Option<bool> {
    config.get("featureGates")?.get(name)?.as_bool()
}
