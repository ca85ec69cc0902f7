//! The kubelet's hash primitive: FNV-1a 32 over go-spew's `%#v` rendering of a `[]byte`, i.e.
//! over the text `([]uint8)[` + the bytes as decimal numbers separated by single spaces + `]`.
//!
//! Speed (decision): the spew text is never built. FNV-1a's low 8 bits evolve independently of
//! the high bits (XOR with a byte and multiplication mod 2^8 only look at the low 8 bits), so
//! for each input byte `v` the whole step "feed ` ` and the decimal digits of `v`" is
//! `h' = h * P[v] + K[v][h mod 256]`, and the next low byte is `L[v][h mod 256]`. Two small
//! independent dependency chains replace 3–4 serial multiply steps per byte; the tables are
//! derived once from the definition and checked against the naive form in tests.

use std::sync::OnceLock;

const OFFSET: u32 = 0x811c_9dc5;
const PRIME: u32 = 0x0100_0193;

#[inline(always)]
fn step(h: u32, b: u8) -> u32 {
    (h ^ u32::from(b)).wrapping_mul(PRIME)
}

const fn steps(mut h: u32, s: &[u8]) -> u32 {
    let mut i = 0;
    while i < s.len() {
        h = (h ^ s[i] as u32).wrapping_mul(PRIME);
        i += 1;
    }
    h
}

/// State after the constant prefix `([]uint8)[`.
const PREFIX_STATE: u32 = steps(OFFSET, b"([]uint8)[");

/// Decimal text of a byte (no allocation).
fn decimal(v: u8, buf: &mut [u8; 3]) -> &[u8] {
    if v >= 100 {
        buf[0] = b'0' + v / 100;
        buf[1] = b'0' + (v / 10) % 10;
        buf[2] = b'0' + v % 10;
        &buf[..3]
    } else if v >= 10 {
        buf[0] = b'0' + v / 10;
        buf[1] = b'0' + v % 10;
        &buf[..2]
    } else {
        buf[0] = b'0' + v;
        &buf[..1]
    }
}

struct Tables {
    /// Indexed by `v << 8 | low`.
    k: Box<[u32; 65536]>,
    l: Box<[u8; 65536]>,
    p: [u32; 256],
}

fn tables() -> &'static Tables {
    static T: OnceLock<Tables> = OnceLock::new();
    T.get_or_init(|| {
        let mut k = Box::new([0u32; 65536]);
        let mut l = Box::new([0u8; 65536]);
        let mut p = [0u32; 256];
        for v in 0..=255u8 {
            let mut buf = [0u8; 3];
            let digits = decimal(v, &mut buf);
            let mut pw = PRIME; // the leading space
            for _ in digits {
                pw = pw.wrapping_mul(PRIME);
            }
            p[usize::from(v)] = pw;
            for low in 0..256u32 {
                let g = steps(step(low, b' '), digits);
                let idx = usize::from(v) << 8 | low as usize;
                k[idx] = g.wrapping_sub(low.wrapping_mul(pw));
                l[idx] = (g & 0xff) as u8;
            }
        }
        Tables { k, l, p }
    })
}

/// FNV-1a 32 of the go-spew dump of `data` as a `[]byte` (what `DeepHashObject` computes).
pub fn spew_fnv32a(data: &[u8]) -> u32 {
    let mut h = PREFIX_STATE;
    if let Some((&first, rest)) = data.split_first() {
        let mut buf = [0u8; 3];
        h = steps(h, decimal(first, &mut buf));
        let t = tables();
        let mut low = (h & 0xff) as usize;
        for &b in rest {
            let idx = (usize::from(b) << 8 | low) & 0xffff;
            h = h.wrapping_mul(t.p[usize::from(b)]).wrapping_add(t.k[idx]);
            low = usize::from(t.l[idx]);
        }
    }
    step(h, b']')
}

/// The same, computed naively from the spew text (reference for tests).
#[cfg(test)]
pub fn spew_fnv32a_naive(data: &[u8]) -> u32 {
    let mut text = String::from("([]uint8)[");
    for (i, b) in data.iter().enumerate() {
        if i > 0 {
            text.push(' ');
        }
        text.push_str(&b.to_string());
    }
    text.push(']');
    steps(OFFSET, text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_vectors() {
        let c = br#"{"name":"test_container","image":"foo/image:v1","args":["/bin/sh","-c","echo abc"],"ports":[{"containerPort":8001}],"resources":{}}"#;
        assert_eq!(spew_fnv32a(c), 0x3c42280f);
        assert_eq!(spew_fnv32a(b"null"), 86995377);
        assert_eq!(
            spew_fnv32a(br#"{"image":"foo/image:v1","name":"test_container"}"#),
            0x8e45cbd0
        );
        assert_eq!(spew_fnv32a(br#"{"image":"bar","name":"foo"}"#), 0x11a6d6d6);
    }

    #[test]
    fn table_form_equals_naive_form() {
        let mut data: Vec<u8> = (0..=255u8).collect();
        data.extend((0..=255u8).rev());
        for n in [0, 1, 2, 3, 10, 100, 512] {
            assert_eq!(
                spew_fnv32a(&data[..n]),
                spew_fnv32a_naive(&data[..n]),
                "len {n}"
            );
        }
    }
}
