//! Go `encoding/json` output: HTML-safe string escaping and integers.
//!
//! Escaping follows `json.Marshal` (HTML escaping on): `<`, `>`, `&` as `\u003c`.., U+2028/U+2029
//! escaped, invalid UTF-8 as `\ufffd`, `\n` `\r` `\t` short forms, other control characters as
//! `\u00xx`. Go 1.22 also gave `\b` and `\f` short forms: [`GoJsonEscaping`] chooses which.

use super::json::utf8_len;

/// Which Go release's `encoding/json` wrote the JSON that was hashed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GoJsonEscaping {
    /// Go < 1.22: backspace and form feed as `\u0008` / `\u000c`.
    Legacy,
    /// Go >= 1.22: backspace and form feed as `\b` / `\f`.
    Modern,
}

impl GoJsonEscaping {
    pub fn as_str(self) -> &'static str {
        match self {
            GoJsonEscaping::Legacy => "legacy",
            GoJsonEscaping::Modern => "modern",
        }
    }
}

impl std::str::FromStr for GoJsonEscaping {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "legacy" => Ok(GoJsonEscaping::Legacy),
            "modern" => Ok(GoJsonEscaping::Modern),
            other => Err(format!(
                "unknown Go JSON escaping {other:?} (expected legacy or modern)"
            )),
        }
    }
}

/// Bytes that need escaping in an ASCII context.
static ESCAPE: [bool; 128] = {
    let mut t = [false; 128];
    let mut i = 0;
    while i < 0x20 {
        t[i] = true;
        i += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t[b'<' as usize] = true;
    t[b'>' as usize] = true;
    t[b'&' as usize] = true;
    t
};

const HEX: &[u8; 16] = b"0123456789abcdef";
const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

#[inline(always)]
fn has_byte(w: u64, b: u8) -> u64 {
    let v = w ^ (ONES * u64::from(b));
    v.wrapping_sub(ONES) & !v & HIGHS
}

pub struct Encoder {
    pub out: Vec<u8>,
    modern: bool,
}

impl Encoder {
    pub fn new(escaping: GoJsonEscaping, capacity: usize) -> Self {
        Encoder {
            out: Vec::with_capacity(capacity),
            modern: escaping == GoJsonEscaping::Modern,
        }
    }

    #[inline(always)]
    pub fn raw(&mut self, b: &[u8]) {
        self.out.extend_from_slice(b);
    }

    #[inline(always)]
    pub fn byte(&mut self, b: u8) {
        self.out.push(b);
    }

    /// `,"key":` (without the comma for the first field of an object).
    #[inline(always)]
    pub fn key(&mut self, first: &mut bool, quoted_key_colon: &[u8]) {
        if !*first {
            self.out.push(b',');
        }
        *first = false;
        self.out.extend_from_slice(quoted_key_colon);
    }

    pub fn bool(&mut self, v: bool) {
        self.raw(if v { b"true" } else { b"false" });
    }

    pub fn int(&mut self, v: i64) {
        let mut buf = [0u8; 20];
        let mut i = buf.len();
        let neg = v < 0;
        let mut u = v.unsigned_abs();
        loop {
            i -= 1;
            buf[i] = b'0' + (u % 10) as u8;
            u /= 10;
            if u == 0 {
                break;
            }
        }
        if neg {
            self.out.push(b'-');
        }
        self.out.extend_from_slice(&buf[i..]);
    }

    /// A JSON string exactly as Go's encoder writes it.
    pub fn string(&mut self, s: &[u8]) {
        self.out.reserve(s.len() + 2);
        self.out.push(b'"');
        let mut start = 0;
        let mut i = 0;
        while i < s.len() {
            // Skip runs of plain ASCII eight bytes at a time.
            while let Some(chunk) = s.get(i..i + 8) {
                let mut a = [0u8; 8];
                a.copy_from_slice(chunk);
                let w = u64::from_le_bytes(a);
                let special = (w & HIGHS)
                    | (w.wrapping_sub(ONES * 0x20) & !w & HIGHS)
                    | has_byte(w, b'"')
                    | has_byte(w, b'\\')
                    | has_byte(w, b'<')
                    | has_byte(w, b'>')
                    | has_byte(w, b'&');
                if special != 0 {
                    // The lowest flagged byte is exact: jump straight to it.
                    i += (special.trailing_zeros() / 8) as usize;
                    break;
                }
                i += 8;
            }
            let Some(&c) = s.get(i) else { break };
            if c < 0x80 {
                if !ESCAPE[c as usize] {
                    i += 1;
                    continue;
                }
                self.out.extend_from_slice(&s[start..i]);
                match c {
                    b'"' | b'\\' => self.out.extend_from_slice(&[b'\\', c]),
                    b'\n' => self.out.extend_from_slice(b"\\n"),
                    b'\r' => self.out.extend_from_slice(b"\\r"),
                    b'\t' => self.out.extend_from_slice(b"\\t"),
                    0x08 if self.modern => self.out.extend_from_slice(b"\\b"),
                    0x0c if self.modern => self.out.extend_from_slice(b"\\f"),
                    _ => self.out.extend_from_slice(&[
                        b'\\',
                        b'u',
                        b'0',
                        b'0',
                        HEX[(c >> 4) as usize],
                        HEX[(c & 0xf) as usize],
                    ]),
                }
                i += 1;
                start = i;
                continue;
            }
            match utf8_len(&s[i..]) {
                None => {
                    self.out.extend_from_slice(&s[start..i]);
                    self.out.extend_from_slice(b"\\ufffd");
                    i += 1;
                    start = i;
                }
                Some(3)
                    if c == 0xe2 && s[i + 1] == 0x80 && (s[i + 2] == 0xa8 || s[i + 2] == 0xa9) =>
                {
                    self.out.extend_from_slice(&s[start..i]);
                    self.out.extend_from_slice(if s[i + 2] == 0xa8 {
                        b"\\u2028"
                    } else {
                        b"\\u2029"
                    });
                    i += 3;
                    start = i;
                }
                Some(n) => i += n,
            }
        }
        self.out.extend_from_slice(&s[start..]);
        self.out.push(b'"');
    }
}

/// Go-escaped JSON string of `s` (convenience for tests and small callers).
pub fn go_json_string(s: &[u8], escaping: GoJsonEscaping) -> Vec<u8> {
    let mut e = Encoder::new(escaping, s.len() + 2);
    e.string(s);
    e.out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes() {
        let m = |s: &[u8]| {
            String::from_utf8_lossy(&go_json_string(s, GoJsonEscaping::Modern)).into_owned()
        };
        let l = |s: &[u8]| {
            String::from_utf8_lossy(&go_json_string(s, GoJsonEscaping::Legacy)).into_owned()
        };
        assert_eq!(m(b"<a&b>"), r#""\u003ca\u0026b\u003e""#);
        assert_eq!(
            m(b"\x08\x0c\n\r\t\x01\x1f\x7f"),
            "\"\\b\\f\\n\\r\\t\\u0001\\u001f\x7f\""
        );
        assert_eq!(l(b"\x08\x0c"), r#""\u0008\u000c""#);
        assert_eq!(m("x\u{2028}y\u{2029}".as_bytes()), r#""x\u2028y\u2029""#);
        assert_eq!(m(b"a\xffb"), r#""a\ufffdb""#);
        assert_eq!(m("é😀/\"\\".as_bytes()), "\"é😀/\\\"\\\\\"");
        assert_eq!(m(b"abcdefghijklmnopq<"), r#""abcdefghijklmnopq\u003c""#);
    }
}
