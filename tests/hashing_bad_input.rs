//! Hostile container JSON (10 MB strings, deep nesting, garbage) through the library: every
//! input is hashed or refused with a clear error, nothing panics, and the heap the hashing adds
//! stays within a small multiple of the input's size. (The CLI on a hostile file: `hash_cli.rs`.)
//!
//! The heap is measured by a counting allocator around the system one (this test binary only;
//! a peak counter is all that is needed, so no heap-profiling crate).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use inplaced::hashing::{
    HashError, HashOptions, HashedPayload, KubeletVersion, hash_container, hashed_json, spew_fnv32a,
};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed on unchanged to the system allocator; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The tests of this binary measure one at a time (other threads' allocations would count).
static MEASURING: Mutex<()> = Mutex::new(());

fn measuring() -> MutexGuard<'static, ()> {
    MEASURING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `f`'s result and the most heap it held at once beyond what was live before it.
fn peak_heap<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let t = f();
    (t, PEAK.load(Ordering::Relaxed).saturating_sub(before))
}

const MIB: usize = 1 << 20;
const TEN_MB: usize = 10 * 1000 * 1000;
const RELEASES: [&str; 3] = ["1.26", "1.30", "1.36"];

fn version(v: &str) -> KubeletVersion {
    KubeletVersion::parse(v).expect("kubelet version")
}

fn hash(doc: &[u8], v: &str) -> Result<u64, HashError> {
    hash_container(doc, &version(v), &HashOptions::default()).map(|h| h.hash)
}

fn container_with_image(image: &str) -> Vec<u8> {
    format!(r#"{{"name":"big","image":"{image}","tty":true}}"#).into_bytes()
}

#[test]
fn ten_megabyte_strings_hash_in_memory_bounded_by_the_input() {
    let _one_at_a_time = measuring();
    let plain = container_with_image(&"a".repeat(TEN_MB));
    // Bytes Go's encoder escapes (`<` is written as `\u003c`): the re-encoded JSON is six
    // times longer than the string.
    let html = container_with_image(&"<".repeat(TEN_MB));
    // Escapes in the input: decoding has to build the string.
    let escaped = container_with_image(&"\\u00e9".repeat(TEN_MB / 6));
    for v in RELEASES {
        for doc in [&plain, &html, &escaped] {
            let (hashed, peak) = peak_heap(|| hash(doc, v));
            let hashed = hashed.unwrap_or_else(|e| panic!("{v}: {e}"));
            assert!(
                peak <= doc.len() + MIB,
                "{v}: hashing a {} byte container held {peak} heap bytes",
                doc.len()
            );
            if doc == &plain {
                // Strings without escapes are hashed from the input itself.
                assert!(peak < MIB, "{v}: {peak} heap bytes for a plain string");
            }
            // `--explain` writes out what is hashed: linear in the input, and it hashes alike.
            let (explained, peak) = peak_heap(|| {
                hashed_json(
                    doc,
                    &version(v),
                    &HashOptions::default(),
                    HashedPayload::Hash,
                )
            });
            let explained = explained.unwrap_or_else(|e| panic!("{v}: {e}"));
            assert!(
                peak <= 16 * doc.len() + MIB,
                "{v}: explaining a {} byte container held {peak} heap bytes",
                doc.len()
            );
            assert_eq!(u64::from(spew_fnv32a(&explained)), hashed, "{v}");
        }
    }
}

/// A key repeated many times, each time merging into what the earlier ones decoded (Go decodes
/// a repeated map or list key into the existing value): the heap stays linear in the input,
/// not in the number of repeats times what they merge into.
#[test]
fn repeated_keys_merge_in_memory_bounded_by_the_input() {
    let _one_at_a_time = measuring();
    let keys: Vec<String> = (0..2000).map(|i| format!(r#""r{i}":"{i}""#)).collect();
    let mut doc = format!(
        r#"{{"name":"c","resources":{{"limits":{{{}}}"#,
        keys.join(",")
    );
    doc.push_str(&r#","limits":{}"#.repeat(2000));
    doc.push_str(r#"},"args":["a","b","c","d","e","f","g","h"]"#);
    doc.push_str(&r#","args":["x"]"#.repeat(2000));
    doc.push('}');
    for v in RELEASES {
        let (hashed, peak) = peak_heap(|| hash(doc.as_bytes(), v));
        hashed.unwrap_or_else(|e| panic!("{v}: {e}"));
        assert!(
            peak <= 8 * doc.len(),
            "{v}: a {} byte container with repeated keys held {peak} heap bytes",
            doc.len()
        );
    }
}

#[test]
fn ten_megabyte_strings_with_an_error_at_the_end() {
    let _one_at_a_time = measuring();
    let mut doc = container_with_image(&"a".repeat(TEN_MB));
    // A raw control byte as the string's last character: Go's scanner refuses it there.
    let at = doc
        .iter()
        .rposition(|&b| b == b'a')
        .expect("the long string");
    doc[at] = 0x01;
    for v in RELEASES {
        let (hashed, peak) = peak_heap(|| hash(&doc, v));
        match hashed {
            Err(HashError::InvalidJson { offset, message }) => {
                assert_eq!(offset, at, "{v}: {message}");
                assert!(message.contains("in string literal"), "{v}: {message}");
            }
            other => panic!("{v}: {other:?}"),
        }
        assert!(peak < MIB, "{v}: {peak} heap bytes to refuse it");
    }
}

#[test]
fn nesting_is_limited_like_go() {
    let _one_at_a_time = measuring();
    // Go's scanner allows 10,000 levels, the container object being the first.
    let nested = |levels: usize| {
        format!(
            r#"{{"name":"deep","notAField":{}{}}}"#,
            "[".repeat(levels),
            "]".repeat(levels)
        )
        .into_bytes()
    };
    let deepest = nested(9_999);
    let too_deep = nested(10_000);
    let unclosed = format!(r#"{{"name":"deep","notAField":{}"#, "[".repeat(MIB)).into_bytes();
    // In a field that expects objects, a list is a type error at once.
    let typed = format!(
        r#"{{"name":"deep","env":{}{}}}"#,
        "[".repeat(9_000),
        "]".repeat(9_000)
    );
    for v in RELEASES {
        let (hashed, peak) = peak_heap(|| hash(&deepest, v));
        // Unknown fields are ignored: the same hash as without the field.
        assert_eq!(hashed.ok(), hash(br#"{"name":"deep"}"#, v).ok(), "{v}");
        assert!(peak < MIB, "{v}: {peak} heap bytes");
        for refused in [&too_deep, &unclosed] {
            let (hashed, peak) = peak_heap(|| hash(refused, v));
            match hashed {
                Err(HashError::InvalidJson { message, .. }) => {
                    assert!(message.contains("exceeded max depth"), "{v}: {message}")
                }
                other => panic!("{v}: {other:?}"),
            }
            assert!(peak < MIB, "{v}: {peak} heap bytes to refuse it");
        }
        match hash(typed.as_bytes(), v) {
            Err(HashError::WrongType { path, .. }) => assert_eq!(path, "env[0]", "{v}"),
            other => panic!("{v}: {other:?}"),
        }
    }
}

/// A small deterministic generator (xorshift64*), so that a failure can be replayed.
struct Bytes(u64);

impl Bytes {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[test]
fn garbage_is_refused_with_a_reason() {
    let _one_at_a_time = measuring();
    let pieces: [&[u8]; 16] = [
        b"{",
        b"}",
        b"[",
        b"]",
        b",",
        b":",
        b"\"",
        b"\\",
        b"null",
        b"1e999",
        b"-",
        b"\"name\"",
        b"\"resources\"",
        b"\"limits\"",
        b"\xff",
        b" ",
    ];
    let mut bytes = Bytes(0x9e37_79b9_7f4a_7c15);
    let mut refused = 0;
    for n in 0..3_000 {
        let mut doc = Vec::new();
        let len = bytes.below(64);
        for _ in 0..len {
            if n % 2 == 0 {
                doc.push(bytes.next() as u8);
            } else {
                doc.extend_from_slice(pieces[bytes.below(pieces.len())]);
            }
        }
        for v in RELEASES {
            let (hashed, peak) = peak_heap(|| hash(&doc, v));
            if let Err(e) = hashed {
                refused += 1;
                // Go's kind of error first: syntax, wrong type or bad quantity.
                let reason = e.to_string();
                assert!(
                    [
                        "invalid JSON at byte ",
                        "cannot decode ",
                        "invalid quantity "
                    ]
                    .iter()
                    .any(|kind| reason.starts_with(kind)),
                    "{reason}"
                );
            }
            assert!(
                peak <= 64 * doc.len() + 64 * 1024,
                "{v}: {peak} heap bytes for {doc:?}"
            );
        }
    }
    // Nearly all of it is not a container.
    assert!(refused > 8_000, "{refused} refused");
}

/// A 10 MB value Go refuses (a quantity, a number where a string goes, a resource name) gives
/// a reason of one readable line: the value is quoted by its start and its length.
#[test]
fn reasons_quote_a_huge_value_by_its_start() {
    // Not measured, but its 10 MB allocations would count in another test's measurement.
    let _one_at_a_time = measuring();
    let huge = "9".repeat(10_000_000);
    let cases = [
        (
            format!(r#"{{"name":"q","resources":{{"limits":{{"cpu":"{huge}x"}}}}}}"#),
            "(10000001 bytes)",
        ),
        (
            format!(r#"{{"name":"n","ports":[{{"containerPort":{huge}}}]}}"#),
            "(10000000 bytes)",
        ),
        (
            format!(r#"{{"name":"k","resources":{{"limits":{{"{huge}":"1x"}}}}}}"#),
            "(10000000 bytes)",
        ),
    ];
    for (doc, length) in &cases {
        let err = hash(doc.as_bytes(), "1.26").expect_err("Go refuses it");
        let reason = err.to_string();
        let start: String = reason.chars().take(200).collect();
        assert!(reason.len() < 400, "{} bytes: {start}…", reason.len());
        assert!(reason.contains(length), "{reason}");
    }
}
