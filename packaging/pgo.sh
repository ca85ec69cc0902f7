#!/usr/bin/env bash
# Profile-guided optimisation (PGO) of inplaced's release build. The container hash (issue 3) is
# a byte-at-a-time parser whose speed depends on branch layout; built with a profile of its own
# work it is about 10 % faster (BENCHMARKS.md). What ships is built this way, and the hashing
# benchmark measures the same build.
#
#   packaging/pgo.sh build              # PGO release build: target/release/inplaced
#   packaging/pgo.sh bench [ARGS...]    # cargo bench -p inplaced --bench hashing [-- ARGS], PGO build
#
# How: (1) the same cargo command with -Cprofile-generate, in target/pgo/instrumented (its own
# directory, so that the flags do not rebuild the ordinary target); (2) that build's `inplaced
# hash` hashes a generated corpus (packaging/pgo/training-containers.py, seeded, not the golden
# corpus the benchmark measures) for eras A, B and C; (3) llvm-profdata merges the counts;
# (4) the command again with -Cprofile-use. Code the training does not run (the agent) keeps its
# full optimisation: -pgso=false stops LLVM from optimising it for size as "cold".
#
# Needs llvm-profdata of rustc's LLVM major version: taken from PATH, /usr/lib/llvm-N or rustup's
# llvm-tools; else Debian's llvm-N package is installed (root) or the script stops and says so.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-}
shift || true
case "$mode" in
  build) cargo_args=(build --release --locked -p inplaced --bin inplaced) ;;
  bench) cargo_args=(bench --locked -p inplaced --bench hashing) ;;
  *) echo "usage: packaging/pgo.sh build | bench [criterion args]" >&2; exit 2 ;;
esac

llvm_major=$(rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')
[ -n "$llvm_major" ] || { echo "pgo: cannot tell rustc's LLVM version (rustc -vV)" >&2; exit 1; }

find_profdata() {
  local sysroot_tool
  sysroot_tool="$(rustc --print sysroot)/lib/rustlib/$(rustc -vV | sed -n 's/^host: //p')/bin/llvm-profdata"
  for candidate in "llvm-profdata-$llvm_major" "/usr/lib/llvm-$llvm_major/bin/llvm-profdata" "$sysroot_tool"; do
    if command -v "$candidate" >/dev/null 2>&1; then
      command -v "$candidate"
      return 0
    fi
  done
  return 1
}

if ! profdata_tool=$(find_profdata); then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "pgo: installing Debian's llvm-$llvm_major for llvm-profdata (rustc uses LLVM $llvm_major)" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "llvm-$llvm_major" >/dev/null
  fi
  profdata_tool=$(find_profdata) || {
    echo "pgo: no llvm-profdata for LLVM $llvm_major (rustc's): install Debian's llvm-$llvm_major" \
      "or rustup's llvm-tools component" >&2
    exit 1
  }
fi

work=$PWD/target/pgo
mkdir -p "$work"

echo "pgo: instrumented build (target/pgo/instrumented)" >&2
if [ "$mode" = build ]; then instrumented_args=("${cargo_args[@]}"); else
  # `cargo bench --no-run` builds the package's binaries too (benchmarks may run them), linked
  # with the same library as the benchmark, so both modes train with the `inplaced hash` CLI.
  instrumented_args=("${cargo_args[@]}" --no-run)
fi
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-generate=$work/raw" CARGO_TARGET_DIR="$work/instrumented" \
  cargo "${instrumented_args[@]}" --message-format=json-render-diagnostics >"$work/artifacts.json"
# Counts from build scripts run during that build are not wanted.
rm -rf "$work/raw"
mkdir -p "$work/raw"
trainee=$work/instrumented/release/inplaced
[ -x "$trainee" ] || { echo "pgo: the instrumented build left no $trainee" >&2; exit 1; }

echo "pgo: training on packaging/pgo/training-containers.py's corpus" >&2
python3 packaging/pgo/training-containers.py 2000 >"$work/containers.jsonl"
train() {
  # Exit code 1 only says that some lines were rejected (the corpus has a few on purpose).
  LLVM_PROFILE_FILE="$work/raw/%m-%p.profraw" "$trainee" hash "$@" <"$work/containers.jsonl" \
    >/dev/null 2>&1 || [ $? = 1 ]
}
for _ in 1 2 3; do
  for release in 1.26 1.28 1.36; do train --kubelet-version "$release"; done
done
train --kubelet-version 1.28 --without-resources
if [ "$mode" = bench ]; then
  # The benchmark's own loop is trained too (on the same generated corpus), or it would be laid
  # out as never-run code around the trained hash.
  bench_exe=$(python3 -c 'import json,sys
for l in open(sys.argv[1]):
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "hashing" and m.get("executable"):
        print(m["executable"])' "$work/artifacts.json")
  [ -n "$bench_exe" ] || { echo "pgo: no benchmark executable in the instrumented build" >&2; exit 1; }
  LLVM_PROFILE_FILE="$work/raw/%m-%p.profraw" INPLACED_PGO_TRAIN="$work/containers.jsonl" "$bench_exe"
fi
"$profdata_tool" merge -o "$work/inplaced.profdata" "$work/raw"

echo "pgo: optimised build with the profile" >&2
export RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-use=$work/inplaced.profdata -Cllvm-args=-pgso=false"
if [ "$mode" = build ]; then
  # The ordinary target directory: the packages take target/release/inplaced.
  cargo "${cargo_args[@]}"
else
  CARGO_TARGET_DIR="$work/optimized" cargo "${cargo_args[@]}" -- "$@"
fi
