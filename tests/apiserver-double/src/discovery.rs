//! Discovery documents: legacy (`/api`, `/apis`, group-version resource lists), the
//! aggregated v2 form when asked for by Accept header, and `/version`.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::resources::ResourceDef;

pub const AGGREGATED_CONTENT_TYPE: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// Whether the client asked for aggregated discovery (v2 or v2beta1).
pub fn wants_aggregated(accept: &str) -> bool {
    accept.contains("as=APIGroupDiscoveryList") && accept.contains("g=apidiscovery.k8s.io")
}

const MAIN_VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
const SUB_VERBS: [&str; 3] = ["get", "patch", "update"];

pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "35",
        "emulationMajor": "1",
        "emulationMinor": "35",
        "gitVersion": "v1.35.0-apiserver-double",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "n/a",
        "compiler": "rustc",
        "platform": "linux/amd64"
    })
}

pub fn core_versions(server_addr: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_addr}]
    })
}

fn groups(defs: &[&ResourceDef]) -> Vec<(String, String)> {
    let set: BTreeSet<(String, String)> = defs
        .iter()
        .filter(|d| !d.group.is_empty())
        .map(|d| (d.group.clone(), d.version.clone()))
        .collect();
    set.into_iter().collect()
}

fn group_doc(group: &str, version: &str) -> Value {
    let gv = json!({"groupVersion": format!("{group}/{version}"), "version": version});
    json!({"name": group, "versions": [gv], "preferredVersion": gv})
}

pub fn group_list(defs: &[&ResourceDef]) -> Value {
    let groups: Vec<Value> = groups(defs).iter().map(|(g, v)| group_doc(g, v)).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub fn group(defs: &[&ResourceDef], name: &str) -> Option<Value> {
    groups(defs).iter().find(|(g, _)| g == name).map(|(g, v)| {
        let mut d = group_doc(g, v);
        d["kind"] = json!("APIGroup");
        d["apiVersion"] = json!("v1");
        d
    })
}

pub fn resource_list(defs: &[&ResourceDef], group: &str, version: &str) -> Option<Value> {
    let mine: Vec<&&ResourceDef> = defs
        .iter()
        .filter(|d| d.group == group && d.version == version)
        .collect();
    if mine.is_empty() {
        return None;
    }
    let mut resources = vec![];
    for d in mine {
        resources.push(json!({
            "name": d.plural,
            "singularName": d.singular,
            "namespaced": d.namespaced,
            "kind": d.kind,
            "verbs": MAIN_VERBS,
            "shortNames": d.short_names,
        }));
        for sub in d.subresources() {
            resources.push(json!({
                "name": format!("{}/{sub}", d.plural),
                "singularName": "",
                "namespaced": d.namespaced,
                "kind": d.kind,
                "verbs": SUB_VERBS,
            }));
        }
    }
    let gv = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}

/// Aggregated discovery for the core group (`core == true`) or all named groups.
pub fn aggregated(defs: &[&ResourceDef], core: bool) -> Value {
    let group_names: Vec<(String, String)> = if core {
        vec![(String::new(), "v1".into())]
    } else {
        groups(defs)
    };
    let items: Vec<Value> = group_names
        .iter()
        .map(|(g, v)| {
            let resources: Vec<Value> = defs
                .iter()
                .filter(|d| d.group == *g && d.version == *v)
                .map(|d| {
                    let gvk = json!({"group": d.group, "version": d.version, "kind": d.kind});
                    let subs: Vec<Value> = d
                        .subresources()
                        .iter()
                        .map(|s| json!({"subresource": s, "responseKind": gvk, "verbs": SUB_VERBS}))
                        .collect();
                    json!({
                        "resource": d.plural,
                        "responseKind": gvk,
                        "scope": if d.namespaced { "Namespaced" } else { "Cluster" },
                        "singularResource": d.singular,
                        "verbs": MAIN_VERBS,
                        "shortNames": d.short_names,
                        "subresources": subs,
                    })
                })
                .collect();
            json!({
                "metadata": {"name": g},
                "versions": [{"version": v, "resources": resources, "freshness": "Current"}]
            })
        })
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items
    })
}
