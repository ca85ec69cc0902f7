//! `inplaced hash`: kubelet container hashes from the command line (a fixed interface that other
//! tools call).
//!
//! - `--kubelet-version X.Y[.Z] [--without-resources] [--explain]`: one v1.Container JSON per
//!   stdin line; one stdout line per input line, in order: the hash as kubelet writes it (or the
//!   hashed JSON with `--explain`). A line Go would reject gives an empty output line, an
//!   `error: line N: <reason>` on stderr and exit code 1 at the end; other lines still hash.
//! - `--pod FILE|-`: a whole Pod (JSON or YAML); one JSON line per container (init, regular and
//!   ephemeral: the kubelet hashes all three) with the hash of every release range.
//!
//! Decisions: a JSON pod is read with this module's own scanner so each container's bytes reach
//! the hash exactly as written. YAML is converted to JSON first (with serde_yaml_ng, a maintained
//! fork of serde_yaml), so YAML numbers are re-printed by serde_json: a quantity written as a bare
//! float (`cpu: 1e3`) may lose its cached spelling; quote quantities in YAML to be exact.

use std::io::{BufRead, Read, Write};
use std::process::ExitCode;

use anyhow::Context;

use super::json::Parser;
use super::version::{Era, NEWEST_KNOWN_MINOR, OLDEST_MINOR};
use super::{
    GoJsonEscaping, HashOptions, HashedPayload, KubeletVersion, format_hash, hash_container,
    hashed_json,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum EscapingArg {
    /// Go < 1.22: `\u0008` and `\u000c`.
    Legacy,
    /// Go >= 1.22: `\b` and `\f`.
    Modern,
}

impl From<EscapingArg> for GoJsonEscaping {
    fn from(e: EscapingArg) -> Self {
        match e {
            EscapingArg::Legacy => GoJsonEscaping::Legacy,
            EscapingArg::Modern => GoJsonEscaping::Modern,
        }
    }
}

/// Compute kubelet container hashes (`io.kubernetes.container.hash`).
#[derive(clap::Args, Debug, Clone)]
pub struct HashArgs {
    /// Kubelet release whose hash to compute: X.Y or X.Y.Z (e.g. 1.30, 1.30.7, v1.37.0-beta.0).
    #[arg(long, value_name = "X.Y[.Z]", required_unless_present = "pod")]
    pub kubelet_version: Option<String>,
    /// Print `io.kubernetes.container.hashWithoutResources` instead (kubelet 1.27–1.30 only).
    #[arg(long)]
    pub without_resources: bool,
    /// Print the exact JSON bytes that are hashed instead of the hash.
    #[arg(long)]
    pub explain: bool,
    /// Hash every container of a Pod (JSON or YAML file, `-` for stdin) for every release.
    #[arg(long, value_name = "FILE|-", conflicts_with_all = ["kubelet_version", "without_resources", "explain"])]
    pub pod: Option<String>,
    /// Go JSON escaping of `\b`/`\f` [default: what the release's kubelet builds used].
    #[arg(long, value_enum, value_name = "legacy|modern")]
    pub go_json_escaping: Option<EscapingArg>,
}

/// Runs `inplaced hash`.
pub fn run(args: &HashArgs) -> anyhow::Result<ExitCode> {
    if let Some(pod) = &args.pod {
        return run_pod(pod, args.go_json_escaping.map(Into::into));
    }
    let Some(version) = &args.kubelet_version else {
        anyhow::bail!("--kubelet-version or --pod is required");
    };
    let version = KubeletVersion::parse(version)?;
    if args.without_resources && version.era() != Era::B {
        eprintln!(
            "error: --without-resources applies only to kubelet 1.27–1.30 (era B); {version} writes no such hash"
        );
        return Ok(ExitCode::from(2));
    }
    let options = HashOptions {
        escaping: args.go_json_escaping.map(Into::into),
        skip_without_resources: !args.without_resources,
    };
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let failed = hash_lines(&mut stdin.lock(), &mut out, &version, &options, args)?;
    out.flush()?;
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// The line loop (separate for testing); returns whether any line was rejected.
fn hash_lines(
    input: &mut impl BufRead,
    out: &mut impl Write,
    version: &KubeletVersion,
    options: &HashOptions,
    args: &HashArgs,
) -> anyhow::Result<bool> {
    let mut failed = false;
    let mut line = Vec::new();
    let mut n = 0usize;
    loop {
        line.clear();
        if input
            .read_until(b'\n', &mut line)
            .context("reading stdin")?
            == 0
        {
            break;
        }
        n += 1;
        let doc = line.strip_suffix(b"\n").unwrap_or(&line);
        let result = if args.explain {
            let payload = if args.without_resources {
                HashedPayload::WithoutResources
            } else {
                HashedPayload::Hash
            };
            hashed_json(doc, version, options, payload)
        } else {
            hash_container(doc, version, options).map(|h| {
                let v = if args.without_resources {
                    h.hash_without_resources.unwrap_or(h.hash)
                } else {
                    h.hash
                };
                format_hash(v).into_bytes()
            })
        };
        match result {
            Ok(bytes) => out.write_all(&bytes)?,
            Err(e) => {
                failed = true;
                // Keep stdout and stderr roughly in step for interactive use.
                out.flush()?;
                eprintln!("error: line {n}: {e}");
            }
        }
        out.write_all(b"\n")?;
    }
    Ok(failed)
}

/// One container of a pod, with its bytes as written.
struct PodContainer<'a> {
    field: &'static str,
    index: usize,
    raw: &'a [u8],
}

const CONTAINER_LISTS: [&str; 3] = ["initContainers", "containers", "ephemeralContainers"];

fn take_string(p: &mut Parser<'_>) -> anyhow::Result<Option<String>> {
    if p.peek_value().map_err(super::HashError::from)? == b'"' {
        let s = p.string().map_err(super::HashError::from)?;
        Ok(Some(String::from_utf8_lossy(&s).into_owned()))
    } else {
        p.skip_value().map_err(super::HashError::from)?;
        Ok(None)
    }
}

/// Finds `metadata.{namespace,name}` and every container's raw bytes in a pod JSON document.
fn pod_containers(src: &[u8]) -> anyhow::Result<(String, Vec<PodContainer<'_>>)> {
    let e = super::HashError::from;
    let mut p = Parser::new(src);
    anyhow::ensure!(
        p.peek_value().map_err(e)? == b'{',
        "a Pod must be a JSON or YAML object"
    );
    let (mut name, mut namespace) = (None, None);
    let mut found = Vec::new();
    p.begin_object().map_err(e)?;
    let mut first = true;
    while let Some(key) = p.next_key(&mut first).map_err(e)? {
        match &*key {
            b"metadata" if p.peek_value().map_err(e)? == b'{' => {
                p.begin_object().map_err(e)?;
                let mut f = true;
                while let Some(k) = p.next_key(&mut f).map_err(e)? {
                    match &*k {
                        b"name" => name = take_string(&mut p)?,
                        b"namespace" => namespace = take_string(&mut p)?,
                        _ => p.skip_value().map_err(e)?,
                    }
                }
            }
            b"spec" if p.peek_value().map_err(e)? == b'{' => {
                p.begin_object().map_err(e)?;
                let mut f = true;
                while let Some(k) = p.next_key(&mut f).map_err(e)? {
                    let list = CONTAINER_LISTS.iter().find(|l| l.as_bytes() == &*k);
                    match list {
                        Some(field) if p.peek_value().map_err(e)? == b'[' => {
                            p.begin_array().map_err(e)?;
                            let mut fa = true;
                            let mut index = 0;
                            while p.next_elem(&mut fa).map_err(e)? {
                                let start = {
                                    p.peek_value().map_err(e)?;
                                    p.offset()
                                };
                                p.skip_value().map_err(e)?;
                                found.push(PodContainer {
                                    field,
                                    index,
                                    raw: &src[start..p.offset()],
                                });
                                index += 1;
                            }
                        }
                        _ => p.skip_value().map_err(e)?,
                    }
                }
            }
            _ => p.skip_value().map_err(e)?,
        }
    }
    p.finish().map_err(e)?;
    found.sort_by_key(|c| CONTAINER_LISTS.iter().position(|l| *l == c.field));
    let pod = match (namespace, name) {
        (Some(ns), Some(n)) => format!("{ns}/{n}"),
        (None, Some(n)) => n,
        _ => String::new(),
    };
    Ok((pod, found))
}

/// Consecutive releases that compute the same values, for the `--pod` report. `escaping` is
/// given only where a release's builds used both Go flavours and they hash differently.
#[derive(serde::Serialize, PartialEq)]
struct ReleaseRange {
    from: String,
    to: String,
    era: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    escaping: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    hash: Option<String>,
    #[serde(
        rename = "hashWithoutResources",
        skip_serializing_if = "Option::is_none"
    )]
    hash_without_resources: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[derive(serde::Serialize)]
struct ContainerReport {
    pod: String,
    field: &'static str,
    index: usize,
    name: Option<String>,
    releases: Vec<ReleaseRange>,
}

fn flavours(minor: u32, forced: Option<GoJsonEscaping>) -> Vec<GoJsonEscaping> {
    if let Some(f) = forced {
        return vec![f];
    }
    match minor {
        0..=26 => vec![GoJsonEscaping::Legacy],
        27..=29 => vec![GoJsonEscaping::Legacy, GoJsonEscaping::Modern],
        _ => vec![GoJsonEscaping::Modern],
    }
}

fn report_container(
    pod: &str,
    c: &PodContainer<'_>,
    forced: Option<GoJsonEscaping>,
) -> anyhow::Result<ContainerReport> {
    // The name as the newest kubelet decodes it (None when it rejects the container).
    let name = hashed_json(
        c.raw,
        &KubeletVersion::from_minor(NEWEST_KNOWN_MINOR)?,
        &HashOptions::default(),
        HashedPayload::Hash,
    )
    .ok()
    .and_then(|j| serde_json::from_slice::<serde_json::Value>(&j).ok())
    .and_then(|v| v.get("name").and_then(|n| n.as_str()).map(str::to_owned));
    let mut ranges: Vec<ReleaseRange> = Vec::new();
    // Ranges that end at the previous minor and may be extended.
    let mut open: Vec<usize> = Vec::new();
    for minor in OLDEST_MINOR..=NEWEST_KNOWN_MINOR {
        let version = KubeletVersion::from_minor(minor)?;
        let mut entries: Vec<ReleaseRange> = Vec::new();
        for escaping in flavours(minor, forced) {
            let (hash, hash_without_resources, error) =
                match hash_container(c.raw, &version, &HashOptions::with_escaping(escaping)) {
                    Ok(h) => (
                        Some(format_hash(h.hash)),
                        h.hash_without_resources.map(format_hash),
                        None,
                    ),
                    Err(err) => (None, None, Some(err.to_string())),
                };
            entries.push(ReleaseRange {
                from: format!("1.{minor}"),
                to: format!("1.{minor}"),
                era: version.era().as_str(),
                escaping: Some(escaping.as_str()),
                hash,
                hash_without_resources,
                error,
            });
        }
        entries.dedup_by(|b, a| {
            a.hash == b.hash
                && a.hash_without_resources == b.hash_without_resources
                && a.error == b.error
        });
        if entries.len() == 1 {
            entries[0].escaping = None;
        }
        let mut next_open = Vec::new();
        for entry in entries {
            let same = |r: &ReleaseRange| {
                r.era == entry.era
                    && r.escaping == entry.escaping
                    && r.hash == entry.hash
                    && r.hash_without_resources == entry.hash_without_resources
                    && r.error == entry.error
            };
            match open.iter().copied().find(|&i| same(&ranges[i])) {
                Some(i) => {
                    ranges[i].to = entry.to;
                    next_open.push(i);
                }
                None => {
                    ranges.push(entry);
                    next_open.push(ranges.len() - 1);
                }
            }
        }
        open = next_open;
    }
    Ok(ContainerReport {
        pod: pod.to_owned(),
        field: c.field,
        index: c.index,
        name,
        releases: ranges,
    })
}

fn run_pod(path: &str, forced: Option<GoJsonEscaping>) -> anyhow::Result<ExitCode> {
    let mut data = Vec::new();
    if path == "-" {
        std::io::stdin()
            .read_to_end(&mut data)
            .context("reading the pod from stdin")?;
    } else {
        data = std::fs::read(path).with_context(|| format!("reading {path}"))?;
    }
    // JSON is read as it is, with Go's decoder (its exact text matters to the hashes); what
    // is not JSON, a YAML flow mapping `{a: b}` included, as YAML.
    let first = data.iter().find(|b| !b.is_ascii_whitespace()).copied();
    let as_json = (first == Some(b'{')).then(|| pod_containers(&data));
    let from_yaml: Vec<u8>;
    let (pod, containers) = match as_json {
        Some(Ok(found)) => found,
        as_json => {
            from_yaml = match yaml_to_json(&data) {
                Ok(value) => serde_json::to_vec(&value)?,
                // It looked like JSON: its error says more than YAML's.
                Err(yaml_error) => {
                    return Err(match as_json {
                        Some(Err(json_error)) => json_error,
                        _ => yaml_error.context("parsing the pod as YAML"),
                    }
                    .context("reading the pod"));
                }
            };
            pod_containers(&from_yaml).context("reading the pod")?
        }
    };
    anyhow::ensure!(
        !containers.is_empty(),
        "no containers found in spec.containers / initContainers / ephemeralContainers"
    );
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for c in &containers {
        let report = report_container(&pod, c, forced)?;
        serde_json::to_writer(&mut out, &report)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// A YAML document as JSON. Aliases are expanded, which can make a small file huge ("billion
/// laughs": an alias of an alias of a list), so the expansion is limited to 16 times the
/// input's size or 1 Mi units, whichever is more (nodes plus string bytes; a document without
/// aliases needs at most twice its size, a manifest reusing an env block a few times stays well
/// within), and a document beyond it is refused: memory stays bounded by the input.
fn yaml_to_json(data: &[u8]) -> anyhow::Result<serde_json::Value> {
    use serde::de::DeserializeSeed;
    let budget = std::cell::Cell::new(data.len().saturating_mul(16).max(1 << 20));
    let value = BoundedValue { budget: &budget }
        .deserialize(serde_yaml_ng::Deserializer::from_slice(data))?;
    Ok(value)
}

/// Builds a `serde_json::Value`, spending one unit per node and per string byte.
#[derive(Clone, Copy)]
struct BoundedValue<'a> {
    budget: &'a std::cell::Cell<usize>,
}

impl BoundedValue<'_> {
    fn spend<E: serde::de::Error>(self, units: usize) -> Result<(), E> {
        let left = self.budget.get().checked_sub(units).ok_or_else(|| {
            E::custom("its aliases expand it to more than 16 times its size; refused")
        })?;
        self.budget.set(left);
        Ok(())
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for BoundedValue<'_> {
    type Value = serde_json::Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for BoundedValue<'_> {
    type Value = serde_json::Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a YAML value")
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Self::Value, E> {
        self.spend(1)?;
        Ok(v.into())
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
        self.spend(1)?;
        Ok(v.into())
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
        self.spend(1)?;
        Ok(v.into())
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Self::Value, E> {
        self.spend(1)?;
        // Not finite (`.nan`, `.inf`): null, as serde_json has no such number.
        Ok(v.into())
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
        self.spend(v.len().saturating_add(1))?;
        Ok(v.into())
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        self.spend(1)?;
        Ok(serde_json::Value::Null)
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        self.visit_unit()
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        serde::de::DeserializeSeed::deserialize(self, d)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        self.spend(1)?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(items.into())
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        self.spend(1)?;
        let mut object = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            self.spend(key.len().saturating_add(1))?;
            let value = map.next_value_seed(self)?;
            object.insert(key, value);
        }
        Ok(object.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_aliases_that_explode_are_refused() {
        let list = vec!["x"; 2_000].join(",");
        let refs = vec!["*a"; 2_000].join(",");
        // A manifest reusing an env block in four containers (more than twice its size).
        let env = (0..40)
            .map(|i| format!("{{name: VARIABLE_{i}, value: some-longer-value-{i}}}"))
            .collect::<Vec<_>>()
            .join(", ");
        let reused = format!(
            "spec:\n  containers:\n  - {{name: a, env: &env [{env}]}}\n  - {{name: b, env: *env}}\n  - {{name: c, env: *env}}\n  - {{name: d, env: *env}}\n"
        );
        assert_eq!(
            yaml_to_json(reused.as_bytes()).unwrap()["spec"]["containers"][3]["env"][39]["name"],
            "VARIABLE_39"
        );
        // 16 KB that would expand to 4 million strings.
        let bomb = format!("a: &a [{list}]\nb: [{refs}]\n");
        let err = yaml_to_json(bomb.as_bytes()).unwrap_err();
        assert!(err.to_string().contains("aliases expand it"), "{err}");
        // Aliases that stay small still work.
        let fine = "base: &b {name: app, image: nginx}\ncopy: *b\n";
        assert_eq!(
            yaml_to_json(fine.as_bytes()).unwrap()["copy"],
            serde_json::json!({"name": "app", "image": "nginx"})
        );
    }

    #[test]
    fn yaml_documents_fit_their_budget() {
        for yaml in [
            "[a,a,a,a,a,a,a,a]",
            "{}",
            "a: [[], [], {}, {}]",
            "x: \"\\U0001F600\\U0001F600\"",
            "spec: {containers: [{name: a, image: b}]}",
        ] {
            yaml_to_json(yaml.as_bytes()).unwrap_or_else(|e| panic!("{yaml}: {e}"));
        }
    }

    #[test]
    fn lines_in_order_with_rejections() {
        let args = HashArgs {
            kubelet_version: Some("1.26".into()),
            without_resources: false,
            explain: false,
            pod: None,
            go_json_escaping: None,
        };
        let input = b"{\"name\":\"test_container\",\"image\":\"foo/image:v1\",\"args\":[\"/bin/sh\",\"-c\",\"echo abc\"],\"ports\":[{\"containerPort\":8001}]}\n{bad\n\n{}\n";
        let mut out = Vec::new();
        let v = KubeletVersion::parse("1.26").unwrap();
        let failed = hash_lines(
            &mut &input[..],
            &mut out,
            &v,
            &HashOptions::default(),
            &args,
        )
        .unwrap();
        assert!(failed);
        assert_eq!(String::from_utf8(out).unwrap(), "3c42280f\n\n\ndab67f1c\n");
    }

    #[test]
    fn finds_pod_containers() {
        let pod = br#"{"metadata":{"name":"p","namespace":"ns"},"spec":{"containers":[{"name":"a"}, {"name":"b"}],"initContainers":[{"name":"i"}],"ephemeralContainers":[{"name":"e","targetContainerName":"a"}]}}"#;
        let (name, cs) = pod_containers(pod).unwrap();
        assert_eq!(name, "ns/p");
        let got: Vec<_> = cs
            .iter()
            .map(|c| {
                (
                    c.field,
                    c.index,
                    String::from_utf8_lossy(c.raw).into_owned(),
                )
            })
            .collect();
        assert_eq!(got[0], ("initContainers", 0, r#"{"name":"i"}"#.to_owned()));
        assert_eq!(got[2], ("containers", 1, r#"{"name":"b"}"#.to_owned()));
        assert_eq!(got[3].0, "ephemeralContainers");
    }
}
