//! What the agent reads of a container's environment — containerd's verbose info (the OCI
//! spec's `process.env`), or `env` output — and kruise's env-from-metadata hash over a container
//! spec and the pod's labels/annotations, for any input: never a panic. The last `KEY=` wins
//! and every key parsed came from the input.
#![no_main]

use std::collections::{BTreeMap, HashMap};

use inplaced::containermeta::plan::{env_from_verbose_info, parse_env};
use inplaced::hashing::extracted_env_from_metadata_hash;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let env = parse_env(text.lines());
    for key in env.keys() {
        assert!(text.contains(&format!("{key}=")));
    }
    let _ = env_from_verbose_info(&HashMap::from([("info".to_string(), text.to_string())]));
    // The container spec is the input; labels and annotations come from the env just parsed.
    let labels: BTreeMap<String, String> = env.clone().into_iter().collect();
    let annotations = BTreeMap::new();
    let _ = extracted_env_from_metadata_hash(data, &labels, &annotations);
});
