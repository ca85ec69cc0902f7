//! Property tests for Go's JSON string escaping.
//!
//! Oracle: serde_json's string escaping (independent code) plus the documented differences of
//! Go's `encoding/json` with HTML escaping: `<`, `>`, `&`, U+2028, U+2029 escaped as `\u00xx` /
//! `\u20xx`, and (legacy Go < 1.22 only) `\b`/`\f` as `\u0008`/`\u000c`. For invalid UTF-8 the
//! oracle is Rust's own UTF-8 validator: Go writes one `\ufffd` per byte of each invalid sequence.

use proptest::prelude::*;

use super::encode::{GoJsonEscaping, go_json_string};

/// serde_json's escaping adjusted to Go's rules.
fn oracle(s: &str, escaping: GoJsonEscaping) -> String {
    let serde = serde_json::to_string(s).unwrap_or_default();
    let mut out = String::with_capacity(serde.len());
    let mut chars = serde.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                let next = chars.next().unwrap_or('\\');
                match (next, escaping) {
                    ('b', GoJsonEscaping::Legacy) => out.push_str("\\u0008"),
                    ('f', GoJsonEscaping::Legacy) => out.push_str("\\u000c"),
                    _ => {
                        out.push('\\');
                        out.push(next);
                    }
                }
            }
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

/// Go's handling of invalid UTF-8 in terms of Rust's validator: valid runs kept, every byte of
/// an invalid sequence becomes U+FFFD, which the encoder then writes as `\ufffd`.
fn oracle_bytes(mut b: &[u8], escaping: GoJsonEscaping) -> String {
    let mut parts: Vec<Result<String, usize>> = Vec::new();
    loop {
        match std::str::from_utf8(b) {
            Ok(s) => {
                parts.push(Ok(s.to_owned()));
                break;
            }
            Err(e) => {
                let valid = e.valid_up_to();
                parts.push(Ok(String::from_utf8_lossy(&b[..valid]).into_owned()));
                let bad = e.error_len().unwrap_or(b.len() - valid);
                parts.push(Err(bad));
                b = &b[valid + bad..];
            }
        }
    }
    let mut out = String::from("\"");
    for p in parts {
        match p {
            Ok(s) => {
                let q = oracle(&s, escaping);
                out.push_str(&q[1..q.len() - 1]);
            }
            Err(n) => out.push_str(&"\\ufffd".repeat(n)),
        }
    }
    out.push('"');
    out
}

fn flavour() -> impl Strategy<Value = GoJsonEscaping> {
    prop_oneof![Just(GoJsonEscaping::Legacy), Just(GoJsonEscaping::Modern)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn escaping_matches_oracle(s in "(?s).{0,40}", esc in flavour()) {
        let got = String::from_utf8(go_json_string(s.as_bytes(), esc)).unwrap();
        prop_assert_eq!(got, oracle(&s, esc));
    }

    #[test]
    fn escaping_special_heavy(s in prop::collection::vec(
        prop::sample::select(vec!['<', '>', '&', '"', '\\', '\u{8}', '\u{c}', '\n', '\u{1}', '\u{7f}', '\u{2028}', '\u{2029}', 'é', '😀', 'a']),
        0..40), esc in flavour()) {
        let s: String = s.into_iter().collect();
        let got = String::from_utf8(go_json_string(s.as_bytes(), esc)).unwrap();
        prop_assert_eq!(got, oracle(&s, esc));
    }

    #[test]
    fn invalid_utf8_matches_oracle(b in prop::collection::vec(any::<u8>(), 0..48), esc in flavour()) {
        let got = String::from_utf8(go_json_string(&b, esc)).unwrap();
        prop_assert_eq!(got, oracle_bytes(&b, esc));
    }
}
