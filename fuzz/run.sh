#!/usr/bin/env bash
# fuzz/run.sh [SECONDS] [TARGET...] — coverage-guided fuzzing of inplaced's parsers, on the
# stable toolchain: builds every target of fuzz/Cargo.toml with libFuzzer's coverage
# instrumentation (what `cargo fuzz build -s none` passes to rustc, without cargo-fuzz or
# nightly: no sanitizer, overflow checks and debug assertions on), then runs each target for
# SECONDS (default 60) from its committed seeds (fuzz/seeds/<target>/), keeping what it finds in
# target/fuzz/corpus/<target>/. A crash stops with the input saved as
# target/fuzz/artifacts/<target>/crash-*; add it to fuzz/seeds/<target>/ with the fix.
# Ends with `fuzz: N passed, M failed` (targets) and exits non-zero when one failed.
set -euo pipefail
cd "$(dirname "$0")"

seconds=${1:-60}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(sed -n 's/^name = "\(.*\)"$/\1/p' Cargo.toml | grep -v '^inplaced-fuzz$')
fi

host=$(rustc -vV | sed -n 's/^host: //p')
out=../target/fuzz
# Instrument the code under test only: with an explicit --target, build scripts and proc
# macros are built without these flags (they would not link without libFuzzer).
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
started=$(date +%s)
cargo build --release --locked --bins --target "$host" --target-dir "$out/build"
echo "fuzz: built ${#targets[@]} targets in $(( $(date +%s) - started )) s"

passed=0
failed=0
for target in "${targets[@]}"; do
  corpus=$out/corpus/$target
  artifacts=$out/artifacts/$target
  mkdir -p "$corpus" "$artifacts"
  echo "=== fuzz $target for ${seconds} s"
  if "$out/build/$host/release/$target" -max_total_time="$seconds" -max_len=8192 \
    -artifact_prefix="$artifacts/" -print_final_stats=1 "$corpus" "seeds/$target" \
    2>"$out/$target.log"; then
    passed=$((passed + 1))
    grep -E "^stat::number_of_executed_units|^stat::new_units_added" "$out/$target.log" | tr '\n' ' '
    echo
  else
    failed=$((failed + 1))
    tail -n 40 "$out/$target.log"
    echo "fuzz: $target FAILED; the input is in $artifacts/"
  fi
done
echo "fuzz: $passed passed, $failed failed"
[ "$failed" = 0 ]
