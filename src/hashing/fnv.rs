//! The kubelet's hash primitive: FNV-1a 32 over go-spew's `%#v` rendering of a `[]byte`, i.e.
//! over the text `([]uint8)[` + the bytes as decimal numbers separated by single spaces + `]`.
//!
//! Speed (decision): the spew text is never built. Every character fed per input byte (a space
//! and decimal digits) is below 0x40, so `h ^ c` differs from `h` by an amount that depends only
//! on the low 6 bits of `h`, and those low 6 bits evolve on their own (multiplication and XOR
//! carry only upwards). So for each input byte `v` the whole step "feed ` ` and the decimal digits
//! of `v`" is `h' = h * P[v] + K[v][h mod 64]`, and the next low 6 bits are `L[v][h mod 64]`. The
//! only serial dependency left is one small table load per byte (the `L` chain). Where the CPU
//! has AVX-512 VBMI a whole `L[v]` fits in one register and the chain advances by one byte
//! permute per two bytes instead ([`vbmi`]). The tables are derived from the definition at
//! compile time and checked against the naive form in tests.
//!
//! The same holds for any fixed byte string: [`Frag`] precomputes, at compile time, its whole
//! effect as one multiply-add, so the constant parts of the encoded JSON (keys, punctuation,
//! escapes) cost one step instead of one serial step per byte. Each also has a quoted form, its
//! effect after a `"`, so that a string's closing quote and the text after it are one step.
//!
//! The hash starts one space before the first byte ([`START_STATE`]), so the first byte, which
//! spew writes without a space, needs no case of its own.

const OFFSET: u32 = 0x811c_9dc5;
const PRIME: u32 = 0x0100_0193;

#[inline(always)]
const fn step(h: u32, b: u8) -> u32 {
    (h ^ b as u32).wrapping_mul(PRIME)
}

#[inline(always)]
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

/// State after feeding the spew text of `bytes`, each preceded by a space, from state `h`.
const fn spaced_steps(mut h: u32, bytes: &[u8]) -> u32 {
    let mut i = 0;
    while i < bytes.len() {
        let v = bytes[i];
        h = step(h, b' ');
        if v >= 100 {
            h = step(h, b'0' + v / 100);
        }
        if v >= 10 {
            h = step(h, b'0' + (v / 10) % 10);
        }
        h = step(h, b'0' + v % 10);
        i += 1;
    }
    h
}

/// `PRIME` to the number of characters [`spaced_steps`] feeds for `bytes`.
const fn spaced_power(bytes: &[u8]) -> u32 {
    let mut p = 1u32;
    let mut i = 0;
    while i < bytes.len() {
        // One step for the space, one per decimal digit.
        let digits = if bytes[i] >= 100 {
            3
        } else if bytes[i] >= 10 {
            2
        } else {
            1
        };
        let mut d = 0;
        while d <= digits {
            p = p.wrapping_mul(PRIME);
            d += 1;
        }
        i += 1;
    }
    p
}

/// A constant byte string with its effect on the hash precomputed: from any state `h`, feeding
/// it gives `h * p + k[h mod 64]`; feeding a `"` and then it gives `h * pq + kq[h mod 64]`
/// (a string's closing quote joined to the constant text after it: one step instead of two).
pub(crate) struct Frag {
    pub bytes: &'static [u8],
    p: u32,
    k: [u32; 64],
    pq: u32,
    kq: [u32; 64],
}

impl Frag {
    pub const fn new(bytes: &'static [u8]) -> Frag {
        let p = spaced_power(bytes);
        let pq = spaced_power(b"\"").wrapping_mul(p);
        let mut k = [0u32; 64];
        let mut kq = [0u32; 64];
        let mut l = 0;
        while l < 64 {
            k[l as usize] = spaced_steps(l, bytes).wrapping_sub(l.wrapping_mul(p));
            kq[l as usize] =
                spaced_steps(spaced_steps(l, b"\""), bytes).wrapping_sub(l.wrapping_mul(pq));
            l += 1;
        }
        Frag {
            bytes,
            p,
            k,
            pq,
            kq,
        }
    }
}

// 64-aligned so that the first 64 bytes of each `low` row load as one vector.
#[repr(C, align(64))]
struct Tables {
    /// `low[v][l]`: the low 6 bits after byte `v` from low bits `l`. Rows are 256 wide although
    /// only 64 entries are used, so that a `u8` index needs no mask and no bounds check (the
    /// unused entries are never touched); the scalar chain's index is a full register, whose
    /// check runs beside the chain.
    low: [[u8; 256]; 256],
    k: [[u32; 64]; 256],
    p: [u32; 256],
}

/// Computed at compile time: every byte is a one-byte [`Frag`].
static TABLES: Tables = {
    let mut t = Tables {
        low: [[0; 256]; 256],
        k: [[0; 64]; 256],
        p: [0; 256],
    };
    let mut v = 0;
    while v < 256 {
        let byte = [v as u8];
        t.p[v] = spaced_power(&byte);
        let mut l = 0;
        while l < 64 {
            let g = spaced_steps(l as u32, &byte);
            t.k[v][l] = g.wrapping_sub((l as u32).wrapping_mul(t.p[v]));
            t.low[v][l] = (g & 63) as u8;
            l += 1;
        }
        v += 1;
    }
    t
};

/// `PRIME`'s inverse modulo 2^32 (it is odd), by Newton's iteration: each step doubles the
/// number of correct low bits, from 3 (an odd number is its own inverse modulo 8).
const PRIME_INVERSE: u32 = {
    let mut x = PRIME;
    let mut i = 0;
    while i < 4 {
        x = x.wrapping_mul(2u32.wrapping_sub(PRIME.wrapping_mul(x)));
        i += 1;
    }
    x
};
const _: () = assert!(PRIME.wrapping_mul(PRIME_INVERSE) == 1);

/// The state one space before [`PREFIX_STATE`]: go-spew writes no space before the first byte,
/// but FNV-1a's step can be undone, so starting here every byte, the first too, is "a space and
/// its digits", and no write has to ask whether it is the first.
const START_STATE: u32 = PREFIX_STATE.wrapping_mul(PRIME_INVERSE) ^ b' ' as u32;

/// FNV-1a 32 of the go-spew dump of a non-empty `[]byte` fed in pieces (no text is built).
/// [`SpewFnv::finish`] needs at least one byte written ([`spew_fnv32a`] takes empty slices
/// too).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SpewFnv {
    h: u32,
}

impl Default for SpewFnv {
    fn default() -> Self {
        SpewFnv { h: START_STATE }
    }
}

impl SpewFnv {
    /// Appends bytes to the hashed slice.
    #[inline]
    pub fn write(&mut self, data: &[u8]) {
        self.write_noting::<false>(data, &[0; 256]);
    }

    /// Appends `data` unless one of its bytes `b` has a nonzero `marks[b]`. Returns the bitwise
    /// OR of the marks: 0 when `data` was written; otherwise the state is unchanged. So a
    /// caller can check its bytes while hashing them instead of before: on the scalar path the
    /// marks are looked up beside the hash's serial chain, where they cost next to nothing (a
    /// marked write is undone); on the vector path a whole table lookup of 64 bytes is a few
    /// instructions, done first.
    #[inline]
    pub(crate) fn write_unless_marked(&mut self, data: &[u8], marks: &[u8; 256]) -> u8 {
        #[cfg(target_arch = "x86_64")]
        if data.len() >= vbmi::SHORTEST && vbmi::available() {
            // SAFETY: the CPU has AVX-512 F, BW and VBMI (checked just above).
            let seen = unsafe { vbmi::marks_of(data, marks) };
            if seen == 0 {
                self.write(data);
            }
            return seen;
        }
        let saved = *self;
        let seen = self.write_noting::<true>(data, marks);
        if seen != 0 {
            *self = saved;
        }
        seen
    }

    #[inline(always)]
    fn write_noting<const MARKS: bool>(&mut self, data: &[u8], marks: &[u8; 256]) -> u8 {
        #[cfg(target_arch = "x86_64")]
        if !MARKS && data.len() >= vbmi::SHORTEST && vbmi::available() {
            // SAFETY: the CPU has AVX-512 F, BW and VBMI (checked just above).
            self.h = unsafe { vbmi::write(self.h, data) };
            return 0;
        }
        let (h, marked) = write_scalar::<MARKS>(self.h, data, marks);
        self.h = h;
        marked
    }

    /// Appends a constant fragment, after a `"` when `quoted`: one multiply-add however long
    /// it is.
    #[inline]
    pub(crate) fn frag(&mut self, f: &Frag, quoted: bool) {
        let (p, k) = if quoted { (f.pq, &f.kq) } else { (f.p, &f.k) };
        self.h = self
            .h
            .wrapping_mul(p)
            .wrapping_add(k[(self.h & 63) as usize]);
    }

    /// The hash of the slice written so far, which must not be empty.
    pub fn finish(&self) -> u32 {
        step(self.h, b']')
    }
}

/// `x`, with where it comes from hidden from the optimiser, so that it cannot rewrite the hash's
/// serial chain into a slower form (narrow a register, or move a multiply onto the chain).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[inline(always)]
fn opaque(mut x: usize) -> usize {
    // SAFETY: the assembly is empty (a comment); it only keeps `x` in a register.
    unsafe {
        std::arch::asm!("/* {0} */", inout(reg) x, options(pure, nomem, nostack, preserves_flags));
    }
    x
}

/// `x`, on targets the empty `asm!` above is not written for (the hash is right, only slower).
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
#[inline(always)]
fn opaque(x: usize) -> usize {
    x
}

/// Hashes `data` from state `h`, one table load per byte on the serial chain; returns the new
/// state and the OR of the bytes' marks when `MARKS`.
///
/// One byte per step: the state's multiply-add (4 cycles) is shorter than the chain's load, so
/// steps taken two bytes at a time (one multiply per pair) gained nothing, and their odd last
/// byte was a branch that half of all strings mispredicted (measured on Zen 4: about 0.7 %
/// faster over the corpus one byte at a time).
///
/// The low bits stay a full-width register hidden behind [`opaque`]: left as a `u8`, the
/// optimiser re-widens them each step (one more cycle on the chain) and unrolls the loop by
/// two, which brings the odd-last-byte branch back (measured: about 1.5 % of era A together).
#[inline(always)]
fn write_scalar<const MARKS: bool>(mut h: u32, data: &[u8], marks: &[u8; 256]) -> (u32, u8) {
    let (k, low, p) = (&TABLES.k, &TABLES.low, &TABLES.p);
    let mut seen = 0u8;
    let mut l = (h & 63) as usize;
    for &v in data {
        let v = usize::from(v);
        if MARKS {
            seen |= marks[v];
        }
        h = h.wrapping_mul(p[v]).wrapping_add(k[v][l & 63]);
        // In bounds: a row has 256 entries and `l` is a byte (the check is off the chain).
        l = opaque(usize::from(low[v][l]));
    }
    (h, seen)
}

/// The low-6-bit chain on AVX-512 VBMI, where a byte's whole low-bits map fits in one register:
/// `vpermb` composes two bytes' maps off the chain, and the chain advances by one permute (3
/// cycles on current Intel cores) per two bytes instead of two dependent loads (5 cycles each).
/// About 2x faster on long strings (0.8 against 1.6 ns per byte; docs/benchmarks-history.md).
#[cfg(target_arch = "x86_64")]
mod vbmi {
    use std::arch::x86_64::*;

    use super::{TABLES, opaque, write_scalar};

    /// Shorter writes stay scalar. Measured over the golden corpus (docs/benchmarks-history.md): from 6 bytes
    /// up the microbenchmark gains, but the whole era A pass over the small inputs lost 3 %
    /// (entering the path is a call, the feature check and a broadcast, and 512-bit work may
    /// lower the core's clock); from 24 or 64 bytes up nothing is lost and long strings gain 2x.
    pub(crate) const SHORTEST: usize = 64;

    /// Whether the CPU has every feature [`write`] is compiled for.
    #[inline]
    pub(crate) fn available() -> bool {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vbmi")
    }

    /// Hashes `data` from state `h`; returns the new state.
    ///
    /// # Safety
    /// The CPU must have AVX-512 F, BW and VBMI ([`available`]).
    #[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
    pub unsafe fn write(mut h: u32, data: &[u8]) -> u32 {
        let (low, k, p) = (&TABLES.low, &TABLES.k, &TABLES.p);
        // The used 64 entries of a byte's `low` row, as one vector.
        let row = |v: usize| {
            let r: &[u8; 256] = &low[v];
            // SAFETY: 64 readable bytes at the start of a row, 64-aligned (rows are 256 bytes in
            // a 64-aligned table).
            unsafe { _mm512_load_si512(r.as_ptr().cast()) }
        };
        let lane0 = |v: __m512i| usize::from(_mm_cvtsi128_si32(_mm512_castsi512_si128(v)) as u8);
        // Every lane holds the current low bits; a permute by a byte's map keeps it so.
        let mut lv = _mm512_set1_epi8((h & 63) as i8);
        let mut pairs = data.chunks_exact(2);
        for pair in &mut pairs {
            let (a, b) = (usize::from(pair[0]), usize::from(pair[1]));
            let ab = _mm512_permutexvar_epi8(row(a), row(b));
            let l0 = lane0(lv);
            lv = _mm512_permutexvar_epi8(lv, ab);
            // The low bits between the two bytes: a load beside the chain.
            let l1 = usize::from(low[a][l0]);
            let (ka, kb, pb) = (k[a][l0 & 63], k[b][l1 & 63], p[b]);
            // The product hidden: else `h * (pa * pb)` becomes two multiplies on the chain.
            h = h
                .wrapping_mul(opaque(p[a].wrapping_mul(pb) as usize) as u32)
                .wrapping_add(ka.wrapping_mul(pb).wrapping_add(kb));
        }
        // An odd last byte: the scalar step (the low bits are `h`'s own again).
        write_scalar::<false>(h, pairs.remainder(), &[0; 256]).0
    }

    /// The bitwise OR of `marks[b]` over the bytes `b` of `data`, 64 bytes at a time: the
    /// 256-entry table sits in four registers, and two two-register permutes and a blend on
    /// the top bit look up 64 bytes at once.
    ///
    /// # Safety
    /// The CPU must have AVX-512 F, BW and VBMI ([`available`]).
    #[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
    pub unsafe fn marks_of(data: &[u8], marks: &[u8; 256]) -> u8 {
        // SAFETY: four 64-byte loads inside the 256-byte table.
        let [t0, t1, t2, t3] =
            [0, 64, 128, 192].map(|at| unsafe { _mm512_loadu_si512(marks[at..].as_ptr().cast()) });
        let mut seen = _mm512_setzero_si512();
        for chunk in data.chunks(64) {
            // Lanes past the chunk's end are not read (the load is masked) and not counted.
            let live: __mmask64 = u64::MAX >> (64 - chunk.len());
            // SAFETY: the masked load reads only the chunk's `chunk.len()` bytes.
            let v = unsafe { _mm512_maskz_loadu_epi8(live, chunk.as_ptr().cast()) };
            let below_128 = _mm512_permutex2var_epi8(t0, v, t1);
            let above_128 = _mm512_permutex2var_epi8(t2, v, t3);
            let high = _mm512_movepi8_mask(v);
            let m = _mm512_mask_blend_epi8(high, below_128, above_128);
            seen = _mm512_or_si512(seen, _mm512_maskz_mov_epi8(live, m));
        }
        let w = _mm512_reduce_or_epi64(seen) as u64;
        w.to_le_bytes().iter().fold(0, |acc, &b| acc | b)
    }
}

/// FNV-1a 32 of the go-spew dump of `data` as a `[]byte` (what `DeepHashObject` computes).
pub fn spew_fnv32a(data: &[u8]) -> u32 {
    if data.is_empty() {
        return step(PREFIX_STATE, b']');
    }
    let mut f = SpewFnv::default();
    f.write(data);
    f.finish()
}

/// The same, computed naively from the spew text (reference for tests).
#[cfg(test)]
pub(crate) fn spew_fnv32a_naive(data: &[u8]) -> u32 {
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

    #[test]
    fn fragments_equal_bytes() {
        const F: Frag = Frag::new(b",\"terminationMessagePath\":\xff\x00\x09\x63");
        const ONE: Frag = Frag::new(b"}");
        for start in [&b""[..], b"{", b"x\x80", b"{\"name\":\"abcdefgh\""] {
            let mut direct = SpewFnv::default();
            let mut fragged = SpewFnv::default();
            for (f, quoted) in [(&F, false), (&ONE, true), (&F, true), (&ONE, false)] {
                direct.write(start);
                if quoted {
                    direct.write(b"\"");
                }
                direct.write(f.bytes);
                fragged.write(start);
                fragged.frag(f, quoted);
            }
            assert_eq!(direct.finish(), fragged.finish(), "{start:?}");
        }
    }

    /// A write with marks hashes exactly like a plain write when no byte is marked, leaves the
    /// state alone when one is, and reports the marks either way: short writes (scalar path)
    /// and long ones (vector path where the CPU has it), a mark at the start, middle or end.
    #[test]
    fn marked_write_hashes_alike_or_not_at_all_and_reports_marks() {
        let mut marks = [0u8; 256];
        marks[usize::from(b'<')] = 1;
        marks[0xff] = 2;
        // Byte 0 is marked but never written: the vector path must not count lanes past the end.
        marks[0] = 8;
        let long: Vec<u8> = (0..300u32).map(|i| b'a' + (i % 26) as u8).collect();
        let mut cases: Vec<Vec<u8>> = [
            &b""[..],
            b"x",
            b"ab",
            b"a<b",
            b"<",
            b"abc\xff",
            b"\xff<",
            b"plain text",
        ]
        .iter()
        .map(|d| d.to_vec())
        .collect();
        for len in [63, 64, 65, 127, 128, 129, 300] {
            cases.push(long[..len].to_vec());
            for at in [0, len / 2, len - 1] {
                let mut d = long[..len].to_vec();
                d[at] = if at % 2 == 0 { b'<' } else { 0xff };
                cases.push(d);
            }
        }
        for data in &cases {
            let mut plain = SpewFnv::default();
            plain.write(b"{");
            let before = plain.finish();
            plain.write(data);
            let mut marked = SpewFnv::default();
            marked.write(b"{");
            let seen = marked.write_unless_marked(data, &marks);
            let expected = data.iter().fold(0, |acc, &b| acc | marks[usize::from(b)]);
            assert_eq!(seen, expected, "{data:?}");
            let want = if expected == 0 {
                plain.finish()
            } else {
                before
            };
            assert_eq!(marked.finish(), want, "{data:?}");
        }
        // The very first byte of the slice (written without a leading space) is marked too, and
        // a refused first write leaves the slice as it was: empty.
        let mut first = SpewFnv::default();
        assert_eq!(first.write_unless_marked(b"<", &marks), 1);
        first.write(b"x");
        assert_eq!(first.finish(), spew_fnv32a_naive(b"x"));
    }

    /// The vector table lookup of marks against the plain fold, every length up to 200 at
    /// several offsets, with marks on the bytes at the edges of the table's four quarters.
    #[test]
    fn vector_marks_equal_plain_fold() {
        if !vector_available() {
            eprintln!("no AVX-512 VBMI here: nothing to check");
            return;
        }
        let mut marks = [0u8; 256];
        for (i, b) in [0x00u8, 0x3f, 0x40, 0x7f, 0x80, 0xbf, 0xc0, 0xff, b'<']
            .into_iter()
            .enumerate()
        {
            marks[usize::from(b)] = 1 << (i % 8);
        }
        let data: Vec<u8> = (0..600u32).map(|i| (i * 37 + i / 7) as u8).collect();
        let plain: Vec<u8> = data
            .iter()
            .map(|&b| if marks[usize::from(b)] == 0 { b } else { b'a' })
            .collect();
        for source in [&data, &plain] {
            for start in 0..8 {
                for len in 0..200 {
                    let piece = &source[start * 50..start * 50 + len];
                    let expected = piece.iter().fold(0, |a, &b| a | marks[usize::from(b)]);
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: checked above that the CPU has AVX-512 F, BW and VBMI.
                    assert_eq!(
                        unsafe { vbmi::marks_of(piece, &marks) },
                        expected,
                        "{start}+{len}"
                    );
                }
            }
        }
    }

    #[test]
    fn pieces_equal_whole() {
        let data: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
        for split in [0, 1, 2, 3, 7, 100, 511, 512] {
            for second in [0, 1, 2, 5] {
                let mut f = SpewFnv::default();
                f.write(&data[..split]);
                f.write(&data[split..(split + second).min(data.len())]);
                f.write(&data[(split + second).min(data.len())..]);
                assert_eq!(f.finish(), spew_fnv32a_naive(&data), "{split}+{second}");
            }
        }
    }

    /// Both paths, forced, against the naive form: every length up to 70 at every start state
    /// offset of a mixed byte pattern (the scalar path with marks).
    #[test]
    fn scalar_and_vector_paths_equal_naive_form() {
        let mut marks = [0u8; 256];
        marks[usize::from(b'<')] = 1;
        marks[0xc3] = 4;
        let data: Vec<u8> = (0..400u32).map(|i| (i * 37 + i / 7) as u8).collect();
        let vector = vector_available();
        if !vector {
            eprintln!("no AVX-512 VBMI here: only the scalar path is checked");
        }
        for start in 0..40 {
            for len in 0..70 {
                let piece = &data[start..start + 1 + len];
                let expected = spew_fnv32a_naive(piece);
                let expected_marks = piece[1..].iter().fold(0, |a, &b| a | marks[usize::from(b)]);
                let mut first = SpewFnv::default();
                first.write(&piece[..1]);
                let (h, seen) = write_scalar::<true>(first.h, &piece[1..], &marks);
                assert_eq!(
                    (step(h, b']'), seen),
                    (expected, expected_marks),
                    "scalar {start}+{len}"
                );
                #[cfg(target_arch = "x86_64")]
                if vector {
                    // SAFETY: checked just above that the CPU has AVX-512 F, BW and VBMI.
                    let h = unsafe { vbmi::write(first.h, &piece[1..]) };
                    assert_eq!(step(h, b']'), expected, "vector {start}+{len}");
                }
            }
        }
    }

    fn vector_available() -> bool {
        #[cfg(target_arch = "x86_64")]
        return vbmi::available();
        #[cfg(not(target_arch = "x86_64"))]
        return false;
    }
}
