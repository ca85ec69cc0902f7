//! Every fuzz target's check over its committed seeds (`fuzz/seeds/<target>/`) and a
//! deterministic stream of mutations of them, on stable, in the normal test suite: each target
//! compiles and holds on this ground; `fuzz/run.sh` explores beyond it (docs/fuzzing.md).

use std::path::PathBuf;

use inplaced_fuzz_checks::TARGETS;

/// Mutations per seed: enough to walk every seed's error paths, quick in a debug build.
const MUTATIONS: u64 = 300;

fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/seeds")
        .join(target);
    let mut seeds: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.expect("entry").path();
            let bytes = std::fs::read(&path).expect("seed");
            (path.display().to_string(), bytes)
        })
        .collect();
    seeds.sort();
    assert!(!seeds.is_empty(), "no seeds in {}", dir.display());
    seeds
}

/// A seeded generator: the mutations are the same on every run.
struct Rng(rand::rngs::StdRng);

impl Rng {
    fn seeded(seed: u64) -> Self {
        Rng(rand::SeedableRng::seed_from_u64(seed))
    }
    fn below(&mut self, n: usize) -> usize {
        rand::RngExt::random_range(&mut self.0, 0..n.max(1))
    }
}

/// One mutation of `seed`, as libFuzzer's simplest ones: flip, insert, erase, truncate, or
/// splice in one of the bytes JSON and Go parsers care about.
fn mutate(seed: &[u8], rng: &mut Rng) -> Vec<u8> {
    const INTERESTING: &[u8] = b"{}[]\":,\\0123456789-+.eEuU \t\n\xff\xc3";
    let mut out = seed.to_vec();
    for _ in 0..=rng.below(3) {
        let at = rng.below(out.len() + 1);
        match rng.below(5) {
            0 if !out.is_empty() => {
                let i = at.min(out.len() - 1);
                out[i] ^= 1 << rng.below(8);
            }
            1 => out.insert(at, INTERESTING[rng.below(INTERESTING.len())]),
            2 if at < out.len() => {
                out.remove(at);
            }
            3 => out.truncate(at),
            _ => {
                let b = INTERESTING[rng.below(INTERESTING.len())];
                if at < out.len() {
                    out[at] = b;
                }
            }
        }
    }
    out
}

#[test]
fn every_target_holds_on_its_seeds_and_their_mutations() {
    for (name, check) in TARGETS {
        let mut rng = Rng::seeded(0x9e37_79b9_7f4a_7c15 ^ name.len() as u64);
        for (path, seed) in seeds(name) {
            check(&seed);
            for _ in 0..MUTATIONS {
                let input = mutate(&seed, &mut rng);
                let outcome = std::panic::catch_unwind(|| check(&input));
                assert!(
                    outcome.is_ok(),
                    "{name} panicked on a mutation of {path}: {:?}",
                    String::from_utf8_lossy(&input)
                );
            }
        }
    }
}

/// Every target has a seed directory and a cargo-fuzz binary, and every seed directory and
/// binary a target.
#[test]
fn the_seed_directories_and_the_fuzz_binaries_are_the_targets() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds");
    let mut found: Vec<String> = std::fs::read_dir(&dir)
        .expect("fuzz/seeds")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    found.sort();
    let mut targets: Vec<String> = TARGETS.iter().map(|(n, _)| n.to_string()).collect();
    targets.sort();
    assert_eq!(found, targets);
    let manifest = std::fs::read_to_string(dir.join("../Cargo.toml")).expect("fuzz/Cargo.toml");
    let mut binaries: Vec<String> = manifest
        .lines()
        .filter_map(|l| l.strip_prefix("name = \"")?.strip_suffix('"'))
        .filter(|name| *name != "inplaced-fuzz")
        .map(str::to_owned)
        .collect();
    binaries.sort();
    assert_eq!(binaries, targets);
}
