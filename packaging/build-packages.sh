#!/usr/bin/env bash
# Builds the .deb and the .rpm of inplaced into target/packages/ — the one command of the README's
# "Install on a node". Installs cargo-deb and cargo-generate-rpm (cargo install --locked) only when
# they are missing. Needs a Rust toolchain; neither dpkg-deb nor rpmbuild is needed. Also writes
# the kubectl plugin's krew release from the same binary (packaging/krew/make-release.sh):
# inplaced-<version>-linux-amd64.tar.gz and its manifest inplaced.krew.yaml, whose download
# address is $INPLACED_RELEASE_URL/<archive> (docs/install.md, "kubectl plugin from krew").
#
#   packaging/build-packages.sh            # release build, then both packages and the krew release
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in cargo-deb cargo-generate-rpm; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "installing $tool" >&2
    cargo install --locked "$tool"
  fi
done

out=target/packages
mkdir -p "$out"
rm -f "$out"/inplaced*.deb "$out"/inplaced*.rpm "$out"/inplaced-*-linux-amd64.tar.gz "$out"/inplaced.krew.yaml

# One release build for both packages (the assets name target/release/inplaced).
cargo build --release --locked -p inplaced --bin inplaced
# cargo-deb strips the binary it packs; the .rpm carries it as built.
cargo deb --no-build --locked -p inplaced --output "$out/"
cargo generate-rpm -p . --output "$out/"
# The krew archive and manifest (the archive carries the binary as built, like the .rpm).
packaging/krew/make-release.sh target/release/inplaced "$out" >/dev/null

ls -1 "$out"/inplaced*.deb "$out"/inplaced*.rpm "$out"/inplaced-*-linux-amd64.tar.gz "$out"/inplaced.krew.yaml
