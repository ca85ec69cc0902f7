#!/usr/bin/env bash
# Builds and runs the Go baseline of benches/hashing.rs on this machine (see README.md).
# Usage: benches/go-baseline/run.sh [seconds per round] [rounds]
# Go and go-spew come from Debian (bookworm-backports for Go 1.21 and 1.23), unpacked into a
# scratch directory: nothing is installed on the machine.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
golden="${INPLACED_GOLDEN_DIR:-$here/../../tests/golden}"
work="${GO_BASELINE_DIR:-/tmp/inplaced-go-baseline}"
seconds="${1:-3}"
rounds="${2:-5}"
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/root"
echo "deb http://deb.debian.org/debian bookworm main" >"$work/sources.list"
echo "deb http://deb.debian.org/debian bookworm-backports main" >>"$work/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
  -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o APT::Sandbox::User=root)
if [ ! -x "$work/root/usr/lib/go-1.23/bin/go" ]; then
  apt-get "${apt_opts[@]}" -qq update
  (cd "$work" && apt-get "${apt_opts[@]}" -qq download golang-1.21-go golang-1.21-src \
    golang-1.23-go golang-1.23-src golang-github-davecgh-go-spew-dev)
  for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$work/root"; done
fi
# release, its Go (1.26.15's golden file has its own Go's escaping; 1.36 gets the newest here),
# golden file, era
for spec in "1.26 1.21 kubelet-1.26.15-go1.21.13.jsonl A" "1.36 1.23 kubelet-1.36.3.jsonl C"; do
  read -r release go file era <<<"$spec"
  minor="${release#1.}"
  build="$work/build-$release"
  rm -rf "$build" && mkdir -p "$build"
  cp "$here/main.go" "$build/"
  # Drop the fields newer than this release.
  awk -v minor="$minor" '{ if (match($0, /\/\/since:1\.[0-9]+/)) { v = substr($0, RSTART + 10, RLENGTH - 10) + 0; if (v > minor) next; sub(/ *\/\/since:1\.[0-9]+/, "") } print }' \
    "$here/types.go.in" >"$build/types.go"
  (cd "$build" && GO111MODULE=off GOPATH="$work/root/usr/share/gocode" GOCACHE="$work/gocache" \
    GOROOT="$work/root/usr/lib/go-$go" "$work/root/usr/lib/go-$go/bin/go" build -o baseline .)
  # Default GOMAXPROCS lets the garbage collector use another core (Go's fast side); one
  # processor is single-threaded like the Rust benchmark.
  for procs in "" 1; do
    echo "kubelet $release${procs:+, GOMAXPROCS=$procs}:"
    GOMAXPROCS="$procs" "$build/baseline" -golden "$golden/$file" -era "$era" -seconds "$seconds" -rounds "$rounds"
  done
done
