//! docs/install.md and the README count the files the packages ship: every CRD under
//! packaging/kubernetes/ is applied by their commands and packed into the .rpm (whose assets name
//! each file), the number the text says is the number shipped, and the roles' CRD names are
//! shipped kinds. A CRD added or removed without the docs fails here.

use std::collections::BTreeSet;
use std::path::Path;

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

/// The `crd-*.yaml` files shipped.
fn shipped_crds() -> BTreeSet<String> {
    std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/kubernetes"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("crd-") && name.ends_with(".yaml"))
        .collect()
}

/// The `crd-*.yaml` file names a text mentions.
fn crds_named_in(text: &str) -> BTreeSet<String> {
    text.split(|c: char| c.is_whitespace() || c == '/' || c == '"' || c == ',' || c == '{')
        .filter(|word| word.starts_with("crd-") && word.ends_with(".yaml"))
        .map(str::to_string)
        .collect()
}

/// The CRD names (`<plural>.<group>`) a shipped CRD file defines.
fn crd_name(file: &str) -> String {
    let text = read(&format!("packaging/kubernetes/{file}"));
    let crd: serde_json::Value = serde_yaml_ng::from_str(&text).unwrap();
    crd["metadata"]["name"].as_str().unwrap().to_string()
}

const NUMBERS: [&str; 10] = [
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
];

#[test]
fn install_md_and_the_readme_apply_every_shipped_crd() {
    let shipped = shipped_crds();
    assert!(!shipped.is_empty());
    for doc in ["docs/install.md", "README.md"] {
        assert_eq!(crds_named_in(&read(doc)), shipped, "{doc}'s kubectl apply");
    }
}

#[test]
fn install_md_says_how_many_crds_ship() {
    let count = NUMBERS[shipped_crds().len()];
    let install = read("docs/install.md");
    assert!(
        install.contains(&format!("Apply the {count} CRDs")),
        "docs/install.md must say \"Apply the {count} CRDs\""
    );
    for number in NUMBERS {
        assert!(
            !install.contains(&format!("{number} names only")),
            "docs/install.md counts the roles' CRD names in words; they are listed below it"
        );
    }
}

#[test]
fn the_rpm_packs_every_shipped_crd() {
    // cargo-deb takes packaging/kubernetes/* whole; cargo-generate-rpm lists each file.
    let manifest = read("Cargo.toml");
    let rpm = &manifest[manifest.find("[package.metadata.generate-rpm]").unwrap()..];
    assert_eq!(crds_named_in(rpm), shipped_crds());
    assert_eq!(
        crds_named_in(&read("tests/packaging/check-packages.sh")),
        shipped_crds(),
        "the package check looks for each"
    );
}

#[test]
fn the_roles_watch_only_shipped_crds_and_kruises() {
    let mut kinds: BTreeSet<String> = shipped_crds().iter().map(|f| crd_name(f)).collect();
    kinds.insert("containerrecreaterequests.apps.kruise.io".into());
    for role in ["rbac-dedicated.yaml", "rbac-node-bound.yaml"] {
        let text = read(&format!("packaging/kubernetes/{role}"));
        let mut named = BTreeSet::new();
        for document in serde_yaml_ng::Deserializer::from_str(&text) {
            let object: serde_json::Value = serde::Deserialize::deserialize(document).unwrap();
            for rule in object["rules"].as_array().into_iter().flatten() {
                if rule["resources"][0] == "customresourcedefinitions" {
                    for name in rule["resourceNames"].as_array().unwrap() {
                        named.insert(name.as_str().unwrap().to_string());
                    }
                }
            }
        }
        assert!(!named.is_empty(), "{role} names the CRDs it watches");
        let unknown: Vec<&String> = named.difference(&kinds).collect();
        assert!(
            unknown.is_empty(),
            "{role} names CRDs nobody ships: {unknown:?}"
        );
    }
}
