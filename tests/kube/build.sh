#!/usr/bin/env bash
# Builds the real Kubernetes components the real-cluster tests run, from the Go modules beside
# this script (each pins one release in its go.mod and go.sum):
#   k8s-1.36/  kube-apiserver, kubelet, kube-controller-manager, kube-scheduler, kubectl
#              (k8s.io/kubernetes v1.36.x)
#   k8s-1.32/  kube-apiserver, kubelet, kube-controller-manager, etcd (3.5, the line 1.32 requires),
#              kruise-manager (github.com/openkruise/kruise v1.9.0, built on the 1.32 libraries)
#   k8s-tools/ helm (helm.sh/helm/v4) and krew (sigs.k8s.io/krew): the tools the chart and
#              plugin tests run, as release "tools" (no Kubernetes version stamped: each tool's own)
#
#   tests/kube/build.sh [RELEASE...]   build (default: 1.32 1.36 tools); prints nothing but errors and times
#   tests/kube/build.sh --bin RELEASE  print the directory of that release's binaries (built or not)
#
# Binaries land in a cache outside the work tree, keyed by the release and a hash of its go.mod
# and go.sum, so a second run (another stage, another checkout on the same machine) builds
# nothing; Go's own build and module caches sit beside them, so a go.sum change rebuilds only
# what changed. INPLACED_TEST_RUNTIME_CACHE moves the cache (default /var/cache/inplaced-test).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
CACHE=${INPLACED_TEST_RUNTIME_CACHE:-/var/cache/inplaced-test}/kube
# go.mod and go.sum are committed and tidy: a build never changes them (-mod=readonly).
export GOCACHE=$CACHE/go-build GOMODCACHE=$CACHE/go-mod GOFLAGS="-mod=readonly -buildvcs=false" GOTOOLCHAIN=local
# No cgo: the components are pure Go, and a static binary does not care which libc runs it.
export CGO_ENABLED=0

die() { echo "tests/kube/build.sh: $*" >&2; exit 1; }
# Go where these machines install it, for a shell that did not read a profile (CI).
command -v go >/dev/null 2>&1 || PATH=/usr/local/go/bin:$PATH

bin_dir() {
  local release=$1 dir=$here/k8s-$1 key
  [ -f "$dir/go.mod" ] || die "no module for release $release (have: $(cd "$here" && ls -d k8s-* | tr '\n' ' '))"
  # This script is in the key too: what it puts beside the binaries changes with it.
  key=$(cat "$dir/go.mod" "$dir/go.sum" "$here/build.sh" | sha256sum | cut -c1-12)
  echo "$CACHE/$release-$key/bin"
}

# The release's exact version, from its module's requirement of k8s.io/kubernetes.
kube_version() { awk '$1 == "k8s.io/kubernetes" { print $2 }' "$here/k8s-$1/go.mod"; }
# A module's required version in a release's go.mod (the tools module's helm and krew).
module_version() { awk -v m="$2" '$1 == m && $2 ~ /^v/ { print $2; exit }' "$here/k8s-$1/go.mod"; }

build() {
  local release=$1 dir=$here/k8s-$1 out version major minor started flags tags lock
  out=$(bin_dir "$release")
  [ -f "$out/.complete" ] && return 0
  # One build of a release at a time on the machine: a second caller (the suite, while CI's
  # background job builds) waits for the first and then finds the binaries there.
  mkdir -p "$CACHE"
  exec {lock}>"$CACHE/build-$release.lock"
  flock "$lock"
  if [ -f "$out/.complete" ]; then exec {lock}>&-; return 0; fi
  flags="" tags=providerless
  if [ "$release" = tools ]; then
    # Not Kubernetes: each tool says its own version, as its release build stamps it.
    local helm krew
    helm=$(module_version tools helm.sh/helm/v4) krew=$(module_version tools sigs.k8s.io/krew)
    [ -n "$helm" ] && [ -n "$krew" ] || die "k8s-tools/go.mod names no helm.sh/helm/v4 or sigs.k8s.io/krew version"
    version="helm $helm, krew $krew" tags=""
    flags=" -X helm.sh/helm/v4/internal/version.version=$helm -X sigs.k8s.io/krew/internal/version.gitTag=$krew"
  else
    version=$(kube_version "$release")
    [ -n "$version" ] || die "k8s-$release/go.mod names no k8s.io/kubernetes version"
    major=${version#v}; major=${major%%.*}
    minor=${version#v*.}; minor=${minor%%.*}
    # Without these the components say v0.0.0: the kubelet's Node object too, and the agent
    # reads nodeInfo.kubeletVersion.
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      flags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
      flags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
    done
  fi
  mkdir -p "$out"
  local tool name
  while read -r tool; do
    [ -n "$tool" ] || continue
    case "$tool" in
      github.com/openkruise/kruise) name=kruise-manager ;;
      go.etcd.io/etcd/server/v3) name=etcd ;;
      *) name=${tool##*/} ;;
    esac
    started=$(date +%s)
    (cd "$dir" && go build -tags "$tags" -ldflags "-s -w $flags" -o "$out/$name.new" "$tool")
    mv "$out/$name.new" "$out/$name"
    echo "built $name $version in $(( $(date +%s) - started )) s"
  done < <(sed -n '/^tool (/,/^)/p' "$dir/go.mod" | sed '1d;$d' | tr -d '\t'; grep '^tool [^(]' "$dir/go.mod" | cut -d' ' -f2)
  # The CRDs and webhook configurations of the kruise release the module builds: the tests
  # apply them as kruise ships them.
  local kruise
  kruise=$(cd "$dir" && go list -m -f '{{.Dir}}' github.com/openkruise/kruise 2>/dev/null || true)
  if [ -n "$kruise" ]; then
    rm -rf "$out/kruise-crds" "$out/kruise-crd-patches" "$out/kruise-webhooks.yaml"
    cp -r "$kruise/config/crd/bases" "$out/kruise-crds"
    # kruise's install turns on its conversion webhook for the CRDs its kustomization names.
    mkdir -p "$out/kruise-crd-patches"
    local patch
    for patch in $(sed -n 's|^- patches/\(webhook_in_.*\.yaml\)$|\1|p' "$kruise/config/crd/kustomization.yaml"); do
      cp "$kruise/config/crd/patches/$patch" "$out/kruise-crd-patches/"
    done
    cp "$kruise/config/webhook/manifests.yaml" "$out/kruise-webhooks.yaml"
    chmod -R u+w "$out/kruise-crds" "$out/kruise-crd-patches" "$out/kruise-webhooks.yaml"
  fi
  echo "$version" > "$out/VERSION"
  touch "$out/.complete"
  # Builds of this release for another go.sum or script are of no more use.
  local stale
  for stale in "$CACHE/$release"-*; do
    [ "$stale" = "${out%/bin}" ] || rm -rf "$stale"
  done
  exec {lock}>&-
}

if [ "${1:-}" = --bin ]; then
  [ $# -eq 2 ] || die "usage: --bin RELEASE"
  bin_dir "$2"
  exit 0
fi
releases=("$@")
[ ${#releases[@]} -gt 0 ] || releases=(1.32 1.36 tools)
for release in "${releases[@]}"; do build "$release"; done
