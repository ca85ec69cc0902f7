//! The v1.Container schema as data: per struct, its JSON field names, the kubelet release that
//! introduced each field, and which JSON each field accepts. `container.rs` declares it (beside
//! the decoder of each struct, in one `fields!` list) and uses it for field lookup; era C's
//! reader ([`super::accept`]) uses it to validate without decoding.
//!
//! Decisions:
//! - Field lookup (Go: exact name first, then case-insensitive with Unicode simple folding) goes
//!   through a perfect hash on the key's first eight bytes and its length, with a multiplier
//!   found at compile time; the match is two word compares against the field's own copy of its
//!   name. A reader that already holds the key as words looks it up as they are
//!   ([`Schema::lookup_words`]). Folding is the rare path and stays a linear scan.

/// What JSON a field accepts (every kind also accepts `null`).
#[derive(Debug)]
pub enum Kind {
    Str,
    Bool,
    /// An integer literal within `min..=max` (Go's int32/int64).
    Int {
        min: i64,
        max: i64,
    },
    /// intstr.IntOrString: a string or an int32.
    IntOrStr,
    /// resource.Quantity: a string, number or boolean literal that parses as a quantity.
    Quantity,
    /// map[ResourceName]Quantity.
    ResourceList,
    List(&'static Kind),
    /// A struct (value or pointer: both accept an object or null).
    Object(&'static Schema),
}

pub(crate) const I32: Kind = Kind::Int {
    min: I32_MIN,
    max: I32_MAX,
};
pub(crate) const I64: Kind = Kind::Int {
    min: i64::MIN,
    max: i64::MAX,
};

#[derive(Debug)]
pub struct Field {
    pub name: &'static str,
    /// First kubelet minor release that knows the field.
    pub since: u32,
    pub kind: Kind,
    /// The name's first 16 bytes as two little-endian words (zero beyond its end), so that a
    /// key read as words is compared without loading the name.
    pub words: [u64; 2],
}

impl Field {
    pub const fn new(name: &'static str, since: u32, kind: Kind) -> Field {
        Field {
            name,
            since,
            kind,
            words: name_words(name.as_bytes()),
        }
    }
}

/// The first 16 bytes of `name` as two little-endian words, zero-padded.
pub const fn name_words(name: &[u8]) -> [u64; 2] {
    let mut w = [0u64; 2];
    let mut i = 0;
    while i < name.len() && i < 16 {
        w[i / 8] |= (name[i] as u64) << (8 * (i % 8));
        i += 1;
    }
    w
}

/// The first 16 bytes of a key as [`name_words`] gives them, read without a byte loop for keys
/// of four bytes or more (overlapping reads agree on the bytes they share).
#[inline(always)]
fn key_words(key: &[u8]) -> [u64; 2] {
    let up_to_8 = |s: &[u8]| -> u64 {
        let n = s.len();
        let le32 = |at: usize| {
            let mut w = [0u8; 4];
            w.copy_from_slice(&s[at..at + 4]);
            u64::from(u32::from_le_bytes(w))
        };
        match n {
            8.. => {
                let mut w = [0u8; 8];
                w.copy_from_slice(&s[..8]);
                u64::from_le_bytes(w)
            }
            4..8 => le32(0) | (le32(n - 4) << (8 * (n - 4))),
            _ => s
                .iter()
                .enumerate()
                .fold(0, |w, (i, &b)| w | (u64::from(b) << (8 * i))),
        }
    };
    [up_to_8(key), up_to_8(key.get(8..).unwrap_or_default())]
}

/// Slot of a key in [`Schema::slots`]: a multiplicative hash of its first word and length.
#[inline(always)]
const fn word_slot(first_word: u64, len: usize, mult: u64) -> usize {
    ((first_word ^ len as u64).wrapping_mul(mult) >> 57) as usize
}

#[derive(Debug)]
pub struct Schema {
    pub fields: &'static [Field],
    /// [`word_slot`] → field index + 1 (0: empty).
    slots: [u8; SLOTS],
    /// The multiplier of [`word_slot`], found at compile time.
    mult: u64,
}

const SLOTS: usize = 128;

impl Schema {
    pub const fn new(fields: &'static [Field]) -> Schema {
        // The first odd multiplier of a fixed sequence under which no two fields share a slot.
        let mut mult: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut tries = 0;
        let slots = loop {
            let mut table = [0u8; SLOTS];
            let mut ok = true;
            let mut i = 0;
            while ok && i < fields.len() {
                let s = word_slot(fields[i].words[0], fields[i].name.len(), mult);
                ok = table[s] == 0;
                table[s] = (i + 1) as u8;
                i += 1;
            }
            if ok {
                break table;
            }
            tries += 1;
            assert!(tries < 100_000, "no collision-free multiplier for a schema");
            mult = mult.wrapping_add(0x6a09_e667_f3bc_c908 | 1).wrapping_add(2);
        };
        Schema {
            fields,
            slots,
            mult,
        }
    }

    /// Exact-name lookup of a key given as [`name_words`], its length and `rest` (its bytes
    /// after the first 16): `None` when no field is named exactly so (the caller then tries
    /// [`Schema::lookup_folded`]), else what [`Schema::lookup`] would answer.
    #[inline(always)]
    pub(crate) fn lookup_words(
        &self,
        words: [u64; 2],
        len: usize,
        rest: &[u8],
        minor: u32,
    ) -> Option<Option<usize>> {
        let i = usize::from(self.slots[word_slot(words[0], len, self.mult)]);
        let f = self.fields.get(i.wrapping_sub(1))?;
        if f.words != words
            || f.name.len() != len
            || (len > 16
                && !f
                    .name
                    .as_bytes()
                    .get(16..)
                    .is_some_and(|n| same_bytes(n, rest)))
        {
            return None;
        }
        Some((f.since <= minor).then_some(i - 1))
    }

    /// Position of a field by name (for the decoder's dispatch, evaluated at compile time).
    pub const fn index_of(&self, name: &str) -> usize {
        let mut i = 0;
        while i < self.fields.len() {
            let f = self.fields[i].name.as_bytes();
            let n = name.as_bytes();
            if f.len() == n.len() {
                let mut j = 0;
                while j < n.len() && f[j] == n[j] {
                    j += 1;
                }
                if j == n.len() {
                    return i;
                }
            }
            i += 1;
        }
        panic!("no such field")
    }

    /// The field a (decoded) object key selects in release `minor`, as Go's decoder picks it.
    #[inline]
    pub(crate) fn lookup(&self, key: &[u8], minor: u32) -> Option<usize> {
        let rest = key.get(16..).unwrap_or_default();
        self.lookup_words(key_words(key), key.len(), rest, minor)
            .unwrap_or_else(|| self.lookup_folded(key, minor))
    }

    /// [`Schema::lookup`] of a key no field is named exactly.
    #[cold]
    pub(crate) fn lookup_folded(&self, key: &[u8], minor: u32) -> Option<usize> {
        let i = self.fold_lookup(key)?;
        (self.fields[i].since <= minor).then_some(i)
    }

    /// Case-insensitive match with Go's simple folding. Field names are ASCII letters, and the
    /// only non-ASCII runes that fold onto ASCII letters are U+017F (ſ, to s) and U+212A (Kelvin
    /// sign, to k).
    fn fold_lookup(&self, key: &[u8]) -> Option<usize> {
        let mut folded = [0u8; 48];
        let mut n = 0;
        let mut i = 0;
        while i < key.len() {
            let c = key[i];
            let (f, adv) = if c < 0x80 {
                (c.to_ascii_lowercase(), 1)
            } else if key[i..].starts_with("\u{17f}".as_bytes()) {
                (b's', 2)
            } else if key[i..].starts_with("\u{212a}".as_bytes()) {
                (b'k', 3)
            } else {
                return None;
            };
            *folded.get_mut(n)? = f;
            n += 1;
            i += adv;
        }
        let folded = &folded[..n];
        self.fields
            .iter()
            .position(|f| f.name.len() == n && f.name.as_bytes().eq_ignore_ascii_case(folded))
    }
}

/// `a == b` for short strings, inline (a library `memcmp` call costs more than the compare).
#[inline(always)]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    let word = |s: &[u8], at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&s[at..at + 8]);
        u64::from_le_bytes(w)
    };
    let half = |s: &[u8], at: usize| {
        let mut w = [0u8; 4];
        w.copy_from_slice(&s[at..at + 4]);
        u32::from_le_bytes(w)
    };
    match n {
        // Overlapping first and last words cover the rest.
        8.. => {
            let mut i = 0;
            while i + 8 < n {
                if word(a, i) != word(b, i) {
                    return false;
                }
                i += 8;
            }
            word(a, n - 8) == word(b, n - 8)
        }
        4..8 => half(a, 0) == half(b, 0) && half(a, n - 4) == half(b, n - 4),
        _ => a.iter().zip(b).all(|(x, y)| x == y),
    }
}

const I32_MIN: i64 = i32::MIN as i64;
const I32_MAX: i64 = i32::MAX as i64;
