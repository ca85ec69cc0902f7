//! What the seeded fault tests share: the seed and the number of cycles, from the environment.

use rand::SeedableRng;
use rand::rngs::StdRng;

/// A number from the environment variable `name`, if it holds one.
pub fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// The run's seed (`INPLACED_FAULT_SEED`, default 20261124) and cycles (`INPLACED_FAULT_CYCLES`,
/// default `default_cycles`), printed so that a failure can be replayed, and the generator.
pub fn seeded_run(default_cycles: u64) -> (u64, usize, StdRng) {
    let seed = env_number("INPLACED_FAULT_SEED").unwrap_or(20261124);
    let cycles = env_number("INPLACED_FAULT_CYCLES").unwrap_or(default_cycles) as usize;
    println!("fault seed {seed}, {cycles} cycles (INPLACED_FAULT_SEED / INPLACED_FAULT_CYCLES)");
    (seed, cycles, StdRng::seed_from_u64(seed))
}
