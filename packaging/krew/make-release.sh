#!/usr/bin/env bash
# The kubectl plugin's release for krew: OUTDIR/inplaced-<version>-linux-amd64.tar.gz (the binary
# `inplaced`, and LICENSE if the repository has one, else README.md) and OUTDIR/inplaced.krew.yaml,
# the krew manifest (packaging/krew/inplaced.yaml) naming that archive's sha256 and its address:
#
#   packaging/krew/make-release.sh BINARY OUTDIR
#
# The address is $INPLACED_RELEASE_URL/inplaced-<version>-linux-amd64.tar.gz: set
# INPLACED_RELEASE_URL to where the release's archives are published. The default,
# https://releases.invalid/inplaced/v<version>, is a placeholder that resolves nowhere
# (.invalid, RFC 2606): `krew install --manifest=... --archive=...` needs no download, an index
# entry does. packaging/build-packages.sh runs this on the release build; tests/krew_plugin.rs on
# the debug build, with the real krew.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 BINARY OUTDIR" >&2; exit 2; }
binary=$1 out=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
[ -x "$binary" ] || { echo "make-release.sh: $binary is not an executable" >&2; exit 1; }

# The crate's version (the [package] table's, the first version line of Cargo.toml), which the
# binary must report as well: the manifest's version is the archive's.
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/Cargo.toml" | head -n1)
[ -n "$version" ] || { echo "make-release.sh: no version in Cargo.toml" >&2; exit 1; }
said=$("$binary" --version)
[ "$said" = "inplaced $version" ] || {
  echo "make-release.sh: $binary says \"$said\", Cargo.toml \"inplaced $version\"" >&2
  exit 1
}

name=inplaced-$version-linux-amd64.tar.gz
url=${INPLACED_RELEASE_URL:-https://releases.invalid/inplaced/v$version}
mkdir -p "$out"
out=$(cd "$out" && pwd)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
install -m 0755 "$binary" "$stage/inplaced"
if [ -f "$root/LICENSE" ]; then cp "$root/LICENSE" "$stage/"; else cp "$root/README.md" "$stage/"; fi
# The same bytes for the same files: sorted, owner 0, time 0, gzip without a name or time.
(cd "$stage" && tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - -- *) \
  | gzip -n > "$out/$name"
sha=$(sha256sum "$out/$name" | cut -d' ' -f1)
sed -e "s|@VERSION@|$version|g" -e "s|@URI@|$url/$name|g" -e "s|@SHA256@|$sha|g" \
  "$root/packaging/krew/inplaced.yaml" > "$out/inplaced.krew.yaml"
echo "$out/$name"
echo "$out/inplaced.krew.yaml"
