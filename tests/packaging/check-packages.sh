#!/usr/bin/env bash
# The packaging check CI runs after the test suite (README, "Install on a node"): builds the .deb
# and the .rpm with packaging/build-packages.sh, then
#   .deb: installs it with dpkg, checks the files, the conffiles and their flags, the unit
#         (systemd-analyze verify and an offline security review), the enable symlink the
#         postinst makes without a running systemd, `inplaced --version` from /usr/bin, that the
#         installed binary passes tests/hash_cli.rs (golden hashes), that a
#         changed conffile survives a reinstall, that remove keeps the conffiles and purge
#         leaves nothing (files, /var/lib/inplaced, /etc/inplaced, symlinks, d-s-h state);
#   .rpm: file list, config flags (%config(noreplace)), scriptlets and requirements with
#         `rpm -qp` (Debian's rpm package), and the payload digests.
# Needs root (dpkg -i). Installs Debian's `rpm` and `systemd` packages when missing. Exits
# non-zero on the first failed check; prints how many checks passed. --no-build checks the
# packages already in target/packages/.
set -euo pipefail
cd "$(dirname "$0")/../.."
started=$(date +%s)

passed=0
ok() { passed=$((passed + 1)); echo "ok: $*"; }
fail() { echo "FAIL: $*" >&2; echo "packaging check: failed after $passed checks"; exit 1; }
expect_eq() { [ "$2" = "$3" ] || fail "$1: expected [$3], got [$2]"; ok "$1"; }
absent() { for p in "$@"; do [ ! -e "$p" ] && [ ! -L "$p" ] || fail "$p is still there"; done; }

need=()
command -v rpm >/dev/null || need+=(rpm)
command -v systemd-analyze >/dev/null || need+=(systemd)
command -v deb-systemd-helper >/dev/null || need+=(init-system-helpers)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]} from Debian" >&2
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# A leftover of an interrupted run: purge it in CI, refuse to touch it elsewhere.
status=$(dpkg-query -W -f='${db:Status-Status}' inplaced 2>/dev/null || true)
if [ -n "$status" ] && [ "$status" != not-installed ]; then
  if [ "${CI:-}" = true ]; then dpkg --purge inplaced >/dev/null; else
    fail "package inplaced is already installed on this machine: dpkg --purge inplaced first"
  fi
fi

# --no-build: check the packages already in target/packages (iterating on this script).
if [ "${1:-}" != --no-build ]; then packaging/build-packages.sh; fi
version=$(cargo metadata --format-version 1 --no-deps --locked |
  python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"]=="inplaced"))')
deb=$(ls target/packages/inplaced_"$version"-1_*.deb)
rpmfile=$(ls target/packages/inplaced-"$version"-1.*.rpm)
echo "built $deb and $rpmfile"

# ---------------------------------------------------------------------------------------- .deb
cleanup() { dpkg --purge inplaced >/dev/null 2>&1 || true; }
trap cleanup EXIT
dpkg -i "$deb" >/dev/null
expect_eq "dpkg status" "$(dpkg-query -W -f='${Status}' inplaced)" "install ok installed"
expect_eq "deb version" "$(dpkg-query -W -f='${Version}' inplaced)" "$version-1"

files=$(dpkg -L inplaced)
for f in /usr/bin/inplaced /usr/bin/kubectl-inplaced /usr/lib/systemd/system/inplaced.service /etc/inplaced/config.toml \
  /etc/default/inplaced /usr/share/doc/inplaced/README.md /usr/share/doc/inplaced/BENCHMARKS.md \
  /usr/share/doc/inplaced/docs/{index.md,install.md,configuration.md} \
  /usr/share/inplaced/kubernetes/{rbac-node-bound.yaml,rbac-dedicated.yaml,admission-policy.yaml,crd-containerresizerequests.yaml,crd-containerrestartrequests.yaml,crd-containerrestartrollouts.yaml,crd-nodeupgradechecks.yaml,kubeconfig.example} \
  /usr/share/inplaced/prometheus/inplaced-rules.yaml; do
  grep -qxF "$f" <<<"$files" || fail "$f is not in the .deb"
  [ -f "$f" ] || fail "$f was not installed"
done
# Every relative link of the installed README resolves beside it.
for link in $(grep -o '](\(docs/\|BENCHMARKS\)[^)#]*' /usr/share/doc/inplaced/README.md | cut -c3- | sort -u); do
  [ -f "/usr/share/doc/inplaced/$link" ] || fail "the installed README links to $link, which is not installed"
done
ok "deb file list"
expect_eq "mode of /usr/bin/inplaced" "$(stat -c %a /usr/bin/inplaced)" 755
expect_eq "Prometheus rules are the shipped ones" "$(sha256sum </usr/share/inplaced/prometheus/inplaced-rules.yaml)" \
  "$(sha256sum <packaging/prometheus/inplaced-rules.yaml)"
expect_eq "unit is the shipped one" "$(sha256sum </usr/lib/systemd/system/inplaced.service)" "$(sha256sum <systemd/inplaced.service)"

# Exactly the two files under /etc are conffiles, as dpkg records them.
expect_eq "conffiles (dpkg info)" "$(sort /var/lib/dpkg/info/inplaced.conffiles)" \
  "$(printf '/etc/default/inplaced\n/etc/inplaced/config.toml')"
expect_eq "conffiles (dpkg-query)" \
  "$(dpkg-query -W -f='${Conffiles}\n' inplaced | awk 'NF {print $1, ($3 == "" ? "" : $3)}' | sort)" \
  "$(printf '/etc/default/inplaced \n/etc/inplaced/config.toml ')"
for s in postinst prerm postrm; do
  cmp -s "/var/lib/dpkg/info/inplaced.$s" "packaging/deb/$s" || fail "maintainer script $s differs from packaging/deb/$s"
done
ok "maintainer scripts are packaging/deb/*"

# The binary from its installed path, and the shipped (all-commented) config parses.
expect_eq "inplaced --version" "$(/usr/bin/inplaced --version)" "inplaced $version"
# The test-only fault switches (feature test-support) are not in the packaged binary.
if grep -q INPLACED_TEST_HANG_WORKER /usr/bin/inplaced; then
  fail "the packaged binary carries the test fault switch INPLACED_TEST_HANG_WORKER"
fi
ok "no test fault switch in /usr/bin/inplaced"
/usr/bin/inplaced agent --config /etc/inplaced/config.toml --node-name check --print-config >/dev/null ||
  fail "the shipped config.toml does not load"
ok "shipped config.toml loads"
# The kubectl plugin runs the same binary (kubectl runs `kubectl-inplaced restart ...`).
expect_eq "mode of /usr/bin/kubectl-inplaced" "$(stat -c %a /usr/bin/kubectl-inplaced)" 755
expect_eq "kubectl-inplaced --version" "$(/usr/bin/kubectl-inplaced --version)" "inplaced $version"
/usr/bin/kubectl-inplaced restart --help | grep -- '--max-unavailable' >/dev/null ||
  fail "kubectl-inplaced restart --help does not show the rollout flags"
ok "kubectl plugin"
# The shipped binary (release profile: fat LTO, one codegen unit) must hash exactly like the tested
# debug build: the CLI's golden tests, run against /usr/bin/inplaced.
if ! out=$(INPLACED_HASH_BIN=/usr/bin/inplaced cargo test --locked -q -p inplaced --test hash_cli 2>&1); then
  echo "$out" >&2
  fail "installed inplaced: tests/hash_cli.rs fails against it"
fi
ok "installed inplaced passes tests/hash_cli.rs (golden files of every era)"
# shellcheck disable=SC1091
( set -a; . /etc/default/inplaced; /usr/bin/inplaced agent --print-config >/dev/null ) ||
  fail "the shipped /etc/default/inplaced does not load"
ok "shipped defaults file loads"

# postinst without a running systemd (PID 1 is not systemd here): enabled, not started.
[ -d /run/systemd/system ] && echo "note: systemd runs here; postinst also started the unit" >&2
# (deb-systemd-helper may link through /lib on merged-/usr systems: compare resolved paths.)
expect_eq "enabled for multi-user.target" \
  "$(readlink -f /etc/systemd/system/multi-user.target.wants/inplaced.service)" \
  "$(readlink -f /usr/lib/systemd/system/inplaced.service)"

# The installed unit. It is only ordered After= containerd/crio/... (no Requires=/BindsTo=), so a
# node without one of them verifies the same; verify must print nothing at all.
verify=$(systemd-analyze verify /usr/lib/systemd/system/inplaced.service 2>&1) ||
  fail "systemd-analyze verify: $verify"
[ -z "$verify" ] || fail "systemd-analyze verify warns: $verify"
ok "systemd-analyze verify"
for dep in Requires BindsTo Requisite PartOf; do
  ! grep -q "^$dep=" /usr/lib/systemd/system/inplaced.service || fail "the unit has $dep="
done
ok "no hard dependency on the runtime"
exposure=$(systemd-analyze security --offline=true --no-pager /usr/lib/systemd/system/inplaced.service 2>&1 |
  sed -n 's/.*Overall exposure level for inplaced.service: \([0-9.]*\).*/\1/p')
[ -n "$exposure" ] || fail "systemd-analyze security gave no exposure level"
awk -v e="$exposure" 'BEGIN {exit !(e <= 3.0)}' || fail "exposure $exposure > 3.0"
ok "systemd-analyze security: exposure $exposure"

# A changed conffile survives a reinstall (the upgrade path of postinst: configure with a version).
echo '# changed by the admin' >>/etc/inplaced/config.toml
dpkg -i "$deb" >/dev/null
grep -q '^# changed by the admin$' /etc/inplaced/config.toml || fail "reinstall replaced a changed conffile"
ok "changed conffile kept on reinstall"

# State the agent and the admin leave behind, for remove and purge.
mkdir -p /var/lib/inplaced && echo intent >/var/lib/inplaced/kill-journal
echo 'apiVersion: v1' >/etc/inplaced/kubeconfig

dpkg -r inplaced >/dev/null
expect_eq "status after remove" "$(dpkg-query -W -f='${Status}' inplaced)" "deinstall ok config-files"
absent /usr/bin/inplaced /usr/bin/kubectl-inplaced /usr/lib/systemd/system/inplaced.service /usr/share/inplaced
[ -f /etc/inplaced/config.toml ] && [ -f /etc/default/inplaced ] || fail "remove deleted the conffiles"
ok "remove keeps the conffiles"

dpkg --purge inplaced >/dev/null
status=$(dpkg-query -W -f='${db:Status-Status}' inplaced 2>/dev/null || true)
[ -z "$status" ] || [ "$status" = not-installed ] || fail "dpkg status after purge: $status"
absent /etc/inplaced /etc/default/inplaced /var/lib/inplaced /run/inplaced \
  /etc/systemd/system/multi-user.target.wants/inplaced.service /etc/systemd/system/inplaced.service \
  /var/lib/systemd/deb-systemd-helper-enabled/inplaced.service.dsh-also \
  /var/lib/systemd/deb-systemd-helper-enabled/multi-user.target.wants/inplaced.service \
  /var/lib/systemd/deb-systemd-helper-masked/inplaced.service /var/lib/dpkg/info/inplaced.conffiles
ok "purge leaves nothing"
trap - EXIT

# ---------------------------------------------------------------------------------------- .rpm
rpm -K --nosignature "$rpmfile" >/dev/null || fail "rpm digests"
ok "rpm digests"
expect_eq "rpm name-version" "$(rpm -qp --qf '%{NAME} %{VERSION}' "$rpmfile" 2>/dev/null)" "inplaced $version"
expect_eq "rpm file list" "$(rpm -qp --list "$rpmfile" 2>/dev/null | sort)" "$(sort <<LIST
/etc/inplaced/config.toml
/etc/sysconfig/inplaced
/usr/bin/inplaced
/usr/bin/kubectl-inplaced
/usr/lib/systemd/system/inplaced.service
/usr/share/doc/inplaced/BENCHMARKS.md
/usr/share/doc/inplaced/README.md
$(for doc in docs/*.md; do echo "/usr/share/doc/inplaced/$doc"; done)
/usr/share/inplaced/kubernetes/admission-policy.yaml
/usr/share/inplaced/kubernetes/crd-containerresizerequests.yaml
/usr/share/inplaced/kubernetes/crd-containerrestartrequests.yaml
/usr/share/inplaced/kubernetes/crd-containerrestartrollouts.yaml
/usr/share/inplaced/kubernetes/crd-nodeupgradechecks.yaml
/usr/share/inplaced/kubernetes/kubeconfig.example
/usr/share/inplaced/kubernetes/rbac-dedicated.yaml
/usr/share/inplaced/kubernetes/rbac-node-bound.yaml
/usr/share/inplaced/prometheus/inplaced-rules.yaml
LIST
)"
expect_eq "rpm config files" "$(rpm -qp --configfiles "$rpmfile" 2>/dev/null | sort)" \
  "$(printf '/etc/inplaced/config.toml\n/etc/sysconfig/inplaced')"
# %config(noreplace): file flags c (config) and n (noreplace).
expect_eq "rpm config flags" \
  "$(rpm -qp --qf '[%{FILENAMES} %{FILEFLAGS:fflags}\n]' "$rpmfile" 2>/dev/null | grep '^/etc/' | sort)" \
  "$(printf '/etc/inplaced/config.toml cn\n/etc/sysconfig/inplaced cn')"
expect_eq "rpm modes" \
  "$(rpm -qp --qf '[%{FILENAMES} %{FILEMODES:perms}\n]' "$rpmfile" 2>/dev/null | grep -E 'bin/(kubectl-)?inplaced |\.service ')" \
  "$(printf '/usr/bin/inplaced -rwxr-xr-x\n/usr/bin/kubectl-inplaced -rwxr-xr-x\n/usr/lib/systemd/system/inplaced.service -rw-r--r--')"
scripts=$(rpm -qp --scripts "$rpmfile" 2>/dev/null)
for want in 'postinstall scriptlet' 'systemctl --no-reload preset inplaced.service' \
  'preuninstall scriptlet' 'systemctl --no-reload disable --now inplaced.service' \
  'postuninstall scriptlet' 'systemctl try-restart inplaced.service' 'systemctl daemon-reload'; do
  grep -qF "$want" <<<"$scripts" || fail "rpm scriptlets lack [$want]: $scripts"
done
ok "rpm scriptlets (%systemd_post, %systemd_preun, %systemd_postun_with_restart)"
rpm -qp --requires "$rpmfile" 2>/dev/null | grep -q '^systemd' || fail "rpm does not require systemd"
ok "rpm requires systemd"

echo "packaging check took $(($(date +%s) - started)) s"
echo "packaging check: all $passed checks passed"
