//! OpenKruise's `extractedEnvFromMetadataHash` (kruise v1.9 `containermeta.GetExpectHash`).
//!
//! Env vars with an empty `value` whose `valueFrom.fieldRef.fieldPath` is
//! `metadata.labels['k']` or `metadata.annotations['k']` (split like `fieldpath.
//! SplitMaybeSubscriptedPath`), minus `SIDECARSET_VERSION`/`SIDECARSET_VERSION_ALT`, become
//! `{name, value}` pairs with the value looked up in the pod's labels/annotations; they are
//! stably sorted by name, Go-JSON encoded as `[]v1.EnvVar` (empty value omitted) and hashed with
//! the kubelet's primitive. No such variables: the hash of `null` (86995377).
//!
//! Decision: kruise v1.9 is built with Go >= 1.22, so the modern escaping is used; the container
//! is decoded with the newest known schema (only its env matters).

use std::collections::BTreeMap;

use super::HashError;
use super::container::{self, Purpose, Str};
use super::encode::{Encoder, GoJsonEscaping, frag};
use super::version::NEWEST_KNOWN_MINOR;

/// Env var names kruise never counts.
pub const SIDECARSET_EXCLUDED_ENVS: [&str; 2] = ["SIDECARSET_VERSION", "SIDECARSET_VERSION_ALT"];

/// `fieldpath.SplitMaybeSubscriptedPath`: `path['subscript']` → (path, subscript).
fn split_subscripted(field_path: &[u8]) -> Option<(&[u8], &[u8])> {
    let s = field_path.strip_suffix(b"']")?;
    let at = s.windows(2).position(|w| w == b"['")?;
    let (path, rest) = (&s[..at], &s[at + 2..]);
    if path.is_empty() {
        return None;
    }
    Some((path, rest))
}

/// The expected `extractedEnvFromMetadataHash` of a container in a pod with these labels and
/// annotations.
pub fn extracted_env_from_metadata_hash(
    container_json: &[u8],
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> Result<u64, HashError> {
    container::with_decoded(container_json, NEWEST_KNOWN_MINOR, Purpose::Check, |c| {
        env_hash(c, labels, annotations)
    })
    .map_err(HashError::from)
}

/// [`extracted_env_from_metadata_hash`] of a decoded container.
fn env_hash(
    c: &container::Container<'_>,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> u64 {
    let mut envs: Vec<(Str<'_>, &[u8])> = Vec::new();
    for env in c.env.as_slice() {
        if !env.value.is_empty() {
            continue;
        }
        let Some(field_ref) = env.value_from.as_ref().and_then(|s| s.field_ref.as_ref()) else {
            continue;
        };
        if SIDECARSET_EXCLUDED_ENVS
            .iter()
            .any(|x| x.as_bytes() == &*env.name)
        {
            continue;
        }
        let Some((path, key)) = split_subscripted(field_ref.field_path) else {
            continue;
        };
        let key = String::from_utf8_lossy(key);
        let value = match path {
            b"metadata.annotations" => annotations.get(key.as_ref()),
            b"metadata.labels" => labels.get(key.as_ref()),
            _ => continue,
        };
        envs.push((env.name, value.map(|s| s.as_bytes()).unwrap_or(b"")));
    }
    // Stable sort by name, bytewise like Go's string comparison.
    envs.sort_by(|a, b| a.0.cmp(b.0));
    let mut e = Encoder::hashing(GoJsonEscaping::Modern);
    if envs.is_empty() {
        e.frag(frag!(b"null"));
    } else {
        e.frag(frag!(b"["));
        for (i, (name, value)) in envs.iter().enumerate() {
            if i > 0 {
                e.frag(frag!(b","));
            }
            e.frag(frag!(b"{\"name\":"));
            e.string(name);
            if !value.is_empty() {
                e.frag(frag!(b",\"value\":"));
                e.string(value);
            }
            e.frag(frag!(b"}"));
        }
        e.frag(frag!(b"]"));
    }
    u64::from(e.hash())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hashing::spew_fnv32a;

    fn map(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn none_is_null() {
        let h = extracted_env_from_metadata_hash(
            br#"{"name":"a","env":[{"name":"X","value":"1"}]}"#,
            &map(&[]),
            &map(&[]),
        );
        assert_eq!(h.unwrap(), 86995377);
    }

    #[test]
    fn sorted_and_looked_up() {
        let c = br#"{"name":"a","env":[
            {"name":"B","valueFrom":{"fieldRef":{"fieldPath":"metadata.labels['l1']"}}},
            {"name":"A","valueFrom":{"fieldRef":{"fieldPath":"metadata.annotations['a<1']"}}},
            {"name":"SIDECARSET_VERSION","valueFrom":{"fieldRef":{"fieldPath":"metadata.labels['l1']"}}},
            {"name":"C","valueFrom":{"fieldRef":{"fieldPath":"metadata.name"}}},
            {"name":"D","valueFrom":{"fieldRef":{"fieldPath":"metadata.labels['missing']"}}},
            {"name":"E","value":"set","valueFrom":{"fieldRef":{"fieldPath":"metadata.labels['l1']"}}}
        ]}"#;
        let got =
            extracted_env_from_metadata_hash(c, &map(&[("l1", "foo")]), &map(&[("a<1", "x&y")]))
                .unwrap();
        let want = spew_fnv32a(
            br#"[{"name":"A","value":"x\u0026y"},{"name":"B","value":"foo"},{"name":"D"}]"#,
        );
        assert_eq!(got, u64::from(want));
    }

    #[test]
    fn subscripts() {
        assert_eq!(
            split_subscripted(b"metadata.annotations['a[b]c']"),
            Some((&b"metadata.annotations"[..], &b"a[b]c"[..]))
        );
        assert_eq!(
            split_subscripted(b"metadata.labels['']"),
            Some((&b"metadata.labels"[..], &b""[..]))
        );
        assert_eq!(split_subscripted(b"metadata.labels"), None);
        assert_eq!(split_subscripted(b"['x']"), None);
    }
}
