//! The kubelet's pod-resource checkpoint files (InPlacePodVerticalScaling), read for
//! `inplaced upgrade-check`: which release wrote each file in the kubelet's root directory, and
//! what the target release will do with it. A kubelet that cannot read one stops with
//! "checkpoint is corrupted" and panics on every start until the file is removed, so the
//! check says so before the upgrade (`docs/kubelet-checkpoints.md` has the formats, the
//! checksum and the sources).

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::hashing::KubeletVersion;

/// 1.27–1.32 (status manager).
pub(crate) const STATUS_MANAGER_FILE: &str = "pod_status_manager_state";
/// 1.33+ (allocation manager).
pub(crate) const ALLOCATED_FILE: &str = "allocated_pods_state";
pub(crate) const ACTUATED_FILE: &str = "actuated_pods_state";

/// Which release line wrote a checkpoint file, from its shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// 1.27–1.31: `allocationEntries`/`resizeStatusEntries` at the top level; the checksum is
    /// over Go's in-memory struct and cannot be checked outside Go.
    StatusManagerV127,
    /// 1.32: `{"data": "<JSON text with allocationEntries>", "checksum": N}`.
    StatusManagerV132,
    /// 1.33+: the same envelope, `data` holding `entries`.
    Allocation,
    /// Not JSON, or of none of these shapes.
    Unknown,
}

impl Format {
    fn describe(self) -> &'static str {
        match self {
            Format::StatusManagerV127 => "1.27–1.31 format",
            Format::StatusManagerV132 => "1.32 format",
            Format::Allocation => "1.33+ format",
            Format::Unknown => "unreadable",
        }
    }
}

/// What the target release does with a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// It reads the file.
    Read,
    /// It reads the file, but what it holds is from before a newer release ran.
    Stale,
    /// It refuses the file and does not start.
    Refused,
    /// It never opens the file.
    Ignored,
}

/// One checkpoint file and what the target release will do with it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub file: String,
    pub format: Format,
    /// For the envelope formats: whether the stored checksum matches the data.
    pub checksum_ok: Option<bool>,
    pub verdict: Verdict,
    /// What happens and what to do, for the operator.
    pub message: String,
}

/// The checksum kubelet's checkpoint manager keeps for an envelope's `data` (1.32+): FNV-1a
/// 32-bit over go-spew's dump of the Go string, which is `(string)` followed by the bytes.
pub(crate) fn envelope_checksum(data: &str) -> u64 {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in b"(string)".iter().chain(data.as_bytes()) {
        hash ^= u32::from(*byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    u64::from(hash)
}

/// The shape of one file's content, and for an envelope whether its checksum matches.
pub fn classify(content: &[u8]) -> (Format, Option<bool>) {
    let Ok(Value::Object(top)) = serde_json::from_slice::<Value>(content) else {
        return (Format::Unknown, None);
    };
    if let Some(data) = top.get("data").and_then(Value::as_str) {
        let checksum_ok = top
            .get("checksum")
            .and_then(Value::as_u64)
            .map(|stored| stored == envelope_checksum(data));
        let inner = serde_json::from_str::<Value>(data).ok();
        let format = match inner.as_ref() {
            Some(Value::Object(o)) if o.contains_key("allocationEntries") => {
                Format::StatusManagerV132
            }
            Some(Value::Object(o)) if o.contains_key("entries") || o.is_empty() => {
                Format::Allocation
            }
            _ => Format::Unknown,
        };
        return (format, checksum_ok);
    }
    let legacy = top.contains_key("checksum")
        && top.keys().all(|k| {
            matches!(
                k.as_str(),
                "allocationEntries" | "resizeStatusEntries" | "checksum"
            )
        });
    if legacy {
        (Format::StatusManagerV127, None)
    } else {
        (Format::Unknown, None)
    }
}

/// When the target release reads its checkpoints at all.
fn gate_note(minor: u32) -> &'static str {
    match minor {
        ..=32 => " (only with the InPlacePodVerticalScaling gate on, which is off by default)",
        33 | 34 => " (with the InPlacePodVerticalScaling gate on, as it is by default)",
        _ => "",
    }
}

/// What a kubelet of release 1.`to` does with the status manager's file.
fn status_manager_verdict(
    to: u32,
    path: &str,
    format: Format,
    checksum_ok: Option<bool>,
    allocation_files: bool,
) -> (Verdict, String) {
    let refused = |why: &str| {
        (
            Verdict::Refused,
            format!(
                "kubelet 1.{to} {why}: it stops with \"checkpoint is corrupted\" and panics on every start{}; drain the node and delete {path} before starting it",
                gate_note(to)
            ),
        )
    };
    match (to, format) {
        (..=26, _) => (
            Verdict::Ignored,
            format!("kubelet 1.{to} has no in-place resize and never opens it"),
        ),
        (33.., _) => (
            Verdict::Ignored,
            format!(
                "kubelet 1.{to} no longer reads this file (allocations are re-admitted from the pod specs); it may be deleted"
            ),
        ),
        (32, Format::StatusManagerV132) if checksum_ok == Some(true) && allocation_files => (
            Verdict::Stale,
            format!(
                "kubelet 1.32 loads it{}, but it was written before this node ran 1.33+, whose allocations are in {ALLOCATED_FILE}: delete {path} before the downgrade",
                gate_note(32)
            ),
        ),
        (32, Format::StatusManagerV132) if checksum_ok == Some(true) => (
            Verdict::Read,
            format!("kubelet 1.32 reads it{}", gate_note(32)),
        ),
        (32, Format::StatusManagerV132) => refused("cannot verify its checksum"),
        (32, Format::StatusManagerV127) => refused(
            "cannot read the 1.27–1.31 format (the format changed in 1.32, kubernetes PR 126620)",
        ),
        (..=31, Format::StatusManagerV127) => (
            Verdict::Read,
            format!(
                "kubelet 1.{to} reads it{} (1.27 and 1.28 may refuse their own file when a container has no cpu or memory request, kubernetes issue 117589)",
                gate_note(to)
            ),
        ),
        (..=31, Format::StatusManagerV132) => refused("cannot read the 1.32 format"),
        (_, _) => refused("cannot read it"),
    }
}

/// What a kubelet of release 1.`to` does with an allocation manager file.
fn allocation_verdict(
    to: u32,
    path: &str,
    format: Format,
    checksum_ok: Option<bool>,
) -> (Verdict, String) {
    if to <= 32 {
        return (
            Verdict::Ignored,
            format!("kubelet 1.{to} does not read this file"),
        );
    }
    if format == Format::Allocation && checksum_ok == Some(true) {
        return (
            Verdict::Read,
            format!("kubelet 1.{to} reads it{}", gate_note(to)),
        );
    }
    (
        Verdict::Refused,
        format!(
            "kubelet 1.{to} cannot read it ({}): it stops with \"checkpoint is corrupted\" and panics on every start{}; drain the node and delete {path} before starting it",
            if format == Format::Allocation {
                "its checksum does not match"
            } else {
                "not the format it writes"
            },
            gate_note(to)
        ),
    )
}

/// When each checkpoint file in `root_dir` last changed, and its size (absent files left out):
/// what tells that [`check`] would answer differently now.
pub(crate) fn stamps(root_dir: &Path) -> Vec<(&'static str, std::time::SystemTime, u64)> {
    [STATUS_MANAGER_FILE, ALLOCATED_FILE, ACTUATED_FILE]
        .into_iter()
        .filter_map(|name| {
            let meta = std::fs::metadata(root_dir.join(name)).ok()?;
            Some((name, meta.modified().ok()?, meta.len()))
        })
        .collect()
}

/// Every checkpoint file in `root_dir` (the kubelet's `--root-dir`) and what kubelet `to` will
/// do with it. A file that cannot be read is reported as such, never skipped.
pub fn check(root_dir: &Path, to: &KubeletVersion) -> Vec<Finding> {
    let minor = to.minor();
    let allocation_files = [ALLOCATED_FILE, ACTUATED_FILE]
        .iter()
        .any(|name| root_dir.join(name).exists());
    let mut findings = Vec::new();
    for name in [STATUS_MANAGER_FILE, ALLOCATED_FILE, ACTUATED_FILE] {
        let path = root_dir.join(name);
        let content = match std::fs::read(&path) {
            Ok(content) => content,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
            Err(err) => {
                findings.push(Finding {
                    file: path.display().to_string(),
                    format: Format::Unknown,
                    checksum_ok: None,
                    verdict: Verdict::Refused,
                    message: format!("cannot read it here ({err}); check it by hand"),
                });
                continue;
            }
        };
        let (format, checksum_ok) = classify(&content);
        let shown = path.display().to_string();
        let (verdict, message) = if name == STATUS_MANAGER_FILE {
            status_manager_verdict(minor, &shown, format, checksum_ok, allocation_files)
        } else {
            allocation_verdict(minor, &shown, format, checksum_ok)
        };
        findings.push(Finding {
            file: shown,
            format,
            checksum_ok,
            verdict,
            message: format!("{}: {message}", format.describe()),
        });
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/checkpoints");

    fn fixture(name: &str) -> Vec<u8> {
        std::fs::read(Path::new(FIXTURES).join(name)).expect("fixture")
    }

    /// Upstream test vectors of the envelope checksum: kubelet's status manager state (1.32)
    /// and CPU manager state tests.
    #[test]
    fn the_envelope_checksum_matches_kubelets_own_vectors() {
        let vectors = [
            (
                r#"{"allocationEntries":{"pod1":{"container1":{"requests":{"cpu":"1Ki","memory":"1Ki"}}}}}"#,
                1_555_601_526,
            ),
            (
                r#"{"allocationEntries":{"pod1":{"container1":{"cpu":"1Ki","memory":"1Ki"}}}}"#,
                143_149_502,
            ),
            (
                r#"{"policyName":"none","defaultCPUSet":"4-6"}"#,
                657_950_972,
            ),
            (
                r#"{"policyName":"static","defaultCPUSet":"7-9","entries":{"pod":{"container1":"4-6","container2":"1-3"}}}"#,
                1_420_829_534,
            ),
        ];
        for (data, want) in vectors {
            assert_eq!(envelope_checksum(data), want, "{data}");
        }
    }

    #[test]
    fn each_release_lines_file_is_recognised() {
        assert_eq!(
            classify(&fixture("v1.27-pod_status_manager_state")),
            (Format::StatusManagerV127, None)
        );
        assert_eq!(
            classify(&fixture("v1.32-pod_status_manager_state")),
            (Format::StatusManagerV132, Some(true))
        );
        assert_eq!(
            classify(&fixture("v1.33-allocated_pods_state")),
            (Format::Allocation, Some(true))
        );
        assert_eq!(
            classify(&fixture("v1.35-allocated_pods_state")),
            (Format::Allocation, Some(true))
        );
        assert_eq!(
            classify(&fixture("corrupt-allocated_pods_state")),
            (Format::Allocation, Some(false))
        );
        assert_eq!(classify(b"{\"a\":"), (Format::Unknown, None));
        assert_eq!(classify(b"[]"), (Format::Unknown, None));
    }

    /// A root directory holding `files` (fixture name → file name).
    fn root(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        for (fixture_name, name) in files {
            std::fs::write(dir.path().join(name), fixture(fixture_name)).expect("write");
        }
        dir
    }

    fn verdicts(dir: &tempfile::TempDir, to: &str) -> Vec<(String, Verdict)> {
        let to = KubeletVersion::parse(to).expect("version");
        check(dir.path(), &to)
            .into_iter()
            .map(|f| {
                let name = Path::new(&f.file)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                (name, f.verdict)
            })
            .collect()
    }

    #[test]
    fn a_1_31_file_stops_kubelet_1_32_and_is_ignored_from_1_33() {
        let dir = root(&[("v1.27-pod_status_manager_state", STATUS_MANAGER_FILE)]);
        assert_eq!(
            verdicts(&dir, "1.32"),
            [(STATUS_MANAGER_FILE.to_string(), Verdict::Refused)]
        );
        assert_eq!(
            verdicts(&dir, "1.31"),
            [(STATUS_MANAGER_FILE.to_string(), Verdict::Read)]
        );
        assert_eq!(
            verdicts(&dir, "1.33"),
            [(STATUS_MANAGER_FILE.to_string(), Verdict::Ignored)]
        );
        let to = KubeletVersion::parse("1.32").expect("version");
        let finding = &check(dir.path(), &to)[0];
        assert!(
            finding.message.contains("delete") && finding.message.contains(STATUS_MANAGER_FILE),
            "{finding:?}"
        );
    }

    #[test]
    fn a_1_32_file_stops_an_older_kubelet_and_goes_stale_after_1_33() {
        let dir = root(&[("v1.32-pod_status_manager_state", STATUS_MANAGER_FILE)]);
        assert_eq!(
            verdicts(&dir, "1.30"),
            [(STATUS_MANAGER_FILE.to_string(), Verdict::Refused)]
        );
        assert_eq!(
            verdicts(&dir, "1.32"),
            [(STATUS_MANAGER_FILE.to_string(), Verdict::Read)]
        );
        let both = root(&[
            ("v1.32-pod_status_manager_state", STATUS_MANAGER_FILE),
            ("v1.33-allocated_pods_state", ALLOCATED_FILE),
        ]);
        assert_eq!(
            verdicts(&both, "1.32"),
            [
                (STATUS_MANAGER_FILE.to_string(), Verdict::Stale),
                (ALLOCATED_FILE.to_string(), Verdict::Ignored)
            ]
        );
    }

    #[test]
    fn allocation_files_are_read_across_1_33_and_later_unless_corrupt() {
        let dir = root(&[
            ("v1.33-allocated_pods_state", ALLOCATED_FILE),
            ("v1.35-allocated_pods_state", ACTUATED_FILE),
        ]);
        for to in ["1.33", "1.34", "1.35", "1.36"] {
            assert_eq!(
                verdicts(&dir, to),
                [
                    (ALLOCATED_FILE.to_string(), Verdict::Read),
                    (ACTUATED_FILE.to_string(), Verdict::Read)
                ],
                "{to}"
            );
        }
        let corrupt = root(&[("corrupt-allocated_pods_state", ALLOCATED_FILE)]);
        assert_eq!(
            verdicts(&corrupt, "1.34"),
            [(ALLOCATED_FILE.to_string(), Verdict::Refused)]
        );
        assert_eq!(
            verdicts(&corrupt, "1.32"),
            [(ALLOCATED_FILE.to_string(), Verdict::Ignored)]
        );
    }

    #[test]
    fn a_kubelet_before_in_place_resize_opens_no_checkpoint() {
        let dir = root(&[("v1.32-pod_status_manager_state", STATUS_MANAGER_FILE)]);
        assert_eq!(
            verdicts(&dir, "1.26"),
            [(STATUS_MANAGER_FILE.to_string(), Verdict::Ignored)]
        );
    }

    #[test]
    fn no_files_no_findings() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(verdicts(&dir, "1.33").is_empty());
    }
}
