//! `inplaced hash` end to end: the built binary on whole golden files (expected values from the
//! golden files, produced by the real Go code), including rejected lines.
//!
//! `INPLACED_HASH_BIN=PATH` runs the same tests against another binary: the packaging check
//! points it at the installed release build (`tests/packaging/check-packages.sh`).

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use inplaced::hashing::{HashOptions, KubeletVersion, hash_container};

fn golden_dir() -> PathBuf {
    let dir = node_sandbox::golden::golden_dir();
    assert!(
        dir.join("README.md").is_file(),
        "golden directory {} not found",
        dir.display()
    );
    dir
}

struct Case {
    input: String,
    hash: Option<String>,
    without: Option<String>,
    json: Option<String>,
}

fn load(file: &str) -> Vec<Case> {
    let text = std::fs::read_to_string(golden_dir().join(file)).expect("golden file");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("json");
            let s = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_owned);
            Case {
                input: s("input_text").expect("input_text"),
                hash: s("hash"),
                without: s("hash_without_resources"),
                json: s("hashed_json"),
            }
        })
        .collect()
}

fn run(args: &[&str], stdin: &str) -> Output {
    let binary = std::env::var_os("INPLACED_HASH_BIN")
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_inplaced").into());
    let mut child = Command::new(binary)
        .arg("hash")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn inplaced");
    let mut pipe = child.stdin.take().expect("stdin");
    let data = stdin.to_owned();
    let writer = std::thread::spawn(move || pipe.write_all(data.as_bytes()));
    let out = child.wait_with_output().expect("wait");
    // A refused invocation exits before reading its input: a broken pipe is its answer.
    match writer.join().expect("writer thread") {
        Err(err) if err.kind() != std::io::ErrorKind::BrokenPipe => panic!("write stdin: {err}"),
        _ => {}
    }
    out
}

/// Runs a whole golden file through the CLI and compares every output line.
fn check_file(file: &str, args: &[&str], want: impl Fn(&Case) -> Option<String>) {
    let cases = load(file);
    let input: String = cases.iter().map(|c| format!("{}\n", c.input)).collect();
    let out = run(args, &input);
    let stdout = String::from_utf8(out.stdout).expect("utf-8 stdout");
    let stderr = String::from_utf8(out.stderr).expect("utf-8 stderr");
    let lines: Vec<&str> = stdout.split('\n').collect();
    assert_eq!(
        lines.len(),
        cases.len() + 1,
        "{file}: one output line per input line"
    );
    let mut rejected = 0;
    for (i, c) in cases.iter().enumerate() {
        match want(c) {
            Some(w) => assert_eq!(lines[i], w, "{file} {args:?} line {}", i + 1),
            None => {
                rejected += 1;
                assert_eq!(
                    lines[i],
                    "",
                    "{file}: rejected line {} gives an empty line",
                    i + 1
                );
                assert!(
                    stderr.contains(&format!("error: line {}: ", i + 1)),
                    "{file}: no stderr message for line {}:\n{stderr}",
                    i + 1
                );
            }
        }
    }
    assert_eq!(
        stderr.lines().count(),
        rejected,
        "{file}: one stderr line per rejected line"
    );
    assert!(rejected > 0, "the golden files contain rejected inputs");
    assert_eq!(
        out.status.code(),
        Some(1),
        "{file}: exit code 1 when a line was rejected"
    );
}

#[test]
fn hashes_release_defaults() {
    // 1.26 defaults to Go 1.21's escaping: matches the go1.21.13 build.
    check_file(
        "kubelet-1.26.15-go1.21.13.jsonl",
        &["--kubelet-version", "1.26.15"],
        |c| c.hash.clone(),
    );
    // The golden 1.28.11 tree was built with a modern Go; 1.28.12, the first patch built with
    // Go 1.22, has the same v1.Container and so the same hashes.
    check_file(
        "kubelet-1.28.11.jsonl",
        &["--kubelet-version", "1.28.12"],
        |c| c.hash.clone(),
    );
    check_file(
        "kubelet-1.36.3.jsonl",
        &["--kubelet-version", "1.36"],
        |c| c.hash.clone(),
    );
}

#[test]
fn escaping_override() {
    check_file(
        "kubelet-1.26.15.jsonl",
        &[
            "--kubelet-version",
            "1.26.15",
            "--go-json-escaping",
            "modern",
        ],
        |c| c.hash.clone(),
    );
}

#[test]
fn without_resources_and_explain() {
    check_file(
        "kubelet-1.30.7.jsonl",
        &["--kubelet-version", "v1.30.7", "--without-resources"],
        |c| c.hash.as_ref().and(c.without.clone()),
    );
    check_file(
        "kubelet-1.37.0-beta.0.jsonl",
        &["--kubelet-version", "v1.37.0-beta.0", "--explain"],
        |c| c.hash.as_ref().and(c.json.clone()),
    );
    // Built with a modern Go, as 1.29.7 was (same v1.Container as 1.29.6).
    check_file(
        "kubelet-1.29.6.jsonl",
        &["--kubelet-version", "1.29.7", "--explain"],
        |c| c.hash.as_ref().and(c.json.clone()),
    );
}

#[test]
fn all_good_lines_exit_zero() {
    let out = run(
        &["--kubelet-version", "1.31"],
        "{\"name\":\"foo\",\"image\":\"bar\"}\n",
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "11a6d6d6\n");
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn refuses_old_and_bad_versions() {
    for v in ["1.15", "1.15.12", "banana"] {
        let out = run(&["--kubelet-version", v], "{}\n");
        assert_ne!(out.status.code(), Some(0), "{v}");
        assert!(!String::from_utf8_lossy(&out.stderr).is_empty());
    }
    let out = run(&["--kubelet-version", "1.15"], "{}\n");
    assert!(String::from_utf8_lossy(&out.stderr).contains("1.16"));
}

#[test]
fn pod_json_and_yaml() {
    let pod_yaml = "metadata:\n  name: web\nspec:\n  containers:\n  - name: foo\n    image: bar\n";
    let out = run(&["--pod", "-"], pod_yaml);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
    let releases = line["releases"].as_array().expect("releases");
    let era_c = releases
        .iter()
        .find(|r| r["era"] == "C")
        .expect("era C range");
    // Upstream era C vector: name foo, image bar.
    assert_eq!(era_c["hash"], "11a6d6d6");
    assert_eq!(era_c["to"], "1.37");
    let pod_json = r#"{"metadata":{"name":"web"},"spec":{"containers":[{"name":"test_container","image":"foo/image:v1","args":["/bin/sh","-c","echo abc"],"ports":[{"containerPort":8001}]}]}}"#;
    let out = run(&["--pod", "-"], pod_json);
    let line: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
    let era_a = line["releases"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["era"] == "A"))
        .cloned();
    // Upstream era A vector (TestHashContainer).
    assert_eq!(era_a.expect("era A")["hash"], "3c42280f");
}

/// YAML that starts with `{` (a flow mapping) is still YAML; a pod whose YAML aliases would
/// expand it a thousandfold is refused with a reason instead of eating the machine's memory.
#[test]
fn pod_yaml_flow_mapping_and_alias_bomb() {
    let flow = "{metadata: {name: web}, spec: {containers: [{name: foo, image: bar}]}}\n";
    let out = run(&["--pod", "-"], flow);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
    let era_c = line["releases"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["era"] == "C"))
        .cloned();
    assert_eq!(era_c.expect("era C")["hash"], "11a6d6d6");

    let list = vec!["x"; 20_000].join(",");
    let refs = vec!["*a"; 20_000].join(",");
    let bomb = format!(
        "metadata: {{name: web}}\nspec:\n  containers: [{{name: foo, image: bar}}]\na: &a [{list}]\nb: [{refs}]\n"
    );
    let out = run(&["--pod", "-"], &bomb);
    assert_ne!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("aliases expand it"), "{stderr}");
}

/// A hostile file (a 10 MB line, garbage, a line nested deeper than Go allows): the other lines
/// are still hashed, in order, as the library hashes them; the bad ones are empty lines with
/// their reasons on stderr, and the exit code is 1.
#[test]
fn hashes_the_other_lines_of_a_hostile_file() {
    let big = format!(r#"{{"name":"big","image":"{}"}}"#, "b".repeat(10_000_000));
    let deep = format!(
        r#"{{"name":"deep","x":{}{}}}"#,
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    let small = r#"{"name":"small","image":"busybox"}"#;
    let last = r#"{"name":"last"}"#;
    let input = [small, &big, "\u{0}\u{1} not json", &deep, last].join("\n") + "\n";
    let out = run(&["--kubelet-version", "1.26"], &input);
    let version = KubeletVersion::parse("1.26").expect("1.26");
    let want = |doc: &str| {
        let hashes = hash_container(doc.as_bytes(), &version, &HashOptions::default());
        format!("{:x}", hashes.expect("hashable").hash)
    };
    let stdout = String::from_utf8(out.stdout).expect("utf-8 stdout");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        [
            want(small).as_str(),
            want(&big).as_str(),
            "",
            "",
            want(last).as_str()
        ]
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("error: line 3: invalid JSON"), "{stderr}");
    assert!(stderr.contains("error: line 4: invalid JSON"), "{stderr}");
    assert!(stderr.contains("exceeded max depth"), "{stderr}");
    assert_eq!(out.status.code(), Some(1), "{stderr}");
}
