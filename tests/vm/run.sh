#!/usr/bin/env bash
# tests/vm/run.sh — inplaced on a real node under real systemd: a Debian 12 VM booted with QEMU,
# systemd 252 as PID 1 on cgroup v2, containerd with the systemd cgroup driver
# (`SystemdCgroup = true`): Debian 12's 1.6, then Debian sid's 2.1 for the end-to-end part. The fresh .deb is installed in it and tests/vm/guest.sh checks the
# unit, the hardening and the node sandbox end to end there (docs/testing.md, "The VM").
#
#   tests/vm/run.sh              build the .deb and the test binaries, then boot, test, power off
#   tests/vm/run.sh --no-build   use target/packages and the test binaries already built
#
# Everything comes from Debian packages: mmdebstrap (installed with apt when missing) builds the
# image; QEMU is `apt-get download`ed with its libraries and unpacked into a private directory,
# so nothing on this machine is installed or removed for it. The image is cached under
# $INPLACED_TEST_RUNTIME_CACHE/vm by a hash of its recipe. The VM has no network (`-nic none`);
# it sees this repository read-only at the same path (so test binaries find what they were built
# with) and writes its results to a shared directory. /dev/kvm on these machines is a paravirtual
# KVM that hangs a stock Debian kernel, so the VM runs under TCG unless INPLACED_VM_ACCEL=kvm.
#
# Ends with `vm: N passed, M failed` and exits non-zero on any failure, timeout or missing result.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$(pwd)

CACHE=${INPLACED_TEST_RUNTIME_CACHE:-/var/cache/inplaced-test}/vm
ACCEL=${INPLACED_VM_ACCEL:-tcg}
# The whole guest run: boot (about 50 s under TCG), the checks, power off.
TIMEOUT=${INPLACED_VM_TIMEOUT:-1200}
OUT=${INPLACED_VM_OUT:-$REPO/target/vm}

T0=$(date +%s)
log() { printf '[vm %4ds] %s\n' "$(( $(date +%s) - T0 ))" "$*" >&2; }
die() { log "ERROR: $*"; echo "vm: 0 passed, 1 failed"; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (mmdebstrap, the image's file ownership)"

# What the image holds. dbus: runc's and containerd's systemd cgroup driver talk to systemd
# through it. busybox-static: the test images. kmod: the 9p modules for the shared directories.
# ca-certificates: every real node has it (kube-rs builds its TLS settings from the system roots
# even for the sandbox API server's plain http).
PACKAGES=systemd,systemd-sysv,udev,dbus,linux-image-amd64,containerd,runc,busybox-static,iproute2,kmod,procps,ca-certificates
SUITE=bookworm

# --------------------------------------------------------------------------- tools from Debian
install_mmdebstrap() {
  command -v mmdebstrap >/dev/null && return 0
  log "apt-get install mmdebstrap"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null
}

# QEMU and the libraries this machine lacks, unpacked into $CACHE/qemu. Installing
# qemu-system-x86 would make apt remove a backported qemu-utils some of these machines carry.
QEMU_DIR=$CACHE/qemu
fetch_qemu() {
  [ -x "$QEMU_DIR/usr/bin/qemu-system-x86_64" ] && return 0
  local debs=$CACHE/qemu-debs pkgs
  mkdir -p "$debs"
  log "fetching qemu-system-x86 and its libraries"
  apt-get update -qq >/dev/null
  pkgs=$(apt-get install -s --no-install-recommends qemu-system-x86 2>/dev/null | awk '/^Inst /{print $2}')
  [ -n "$pkgs" ] || die "apt-get cannot resolve qemu-system-x86"
  # shellcheck disable=SC2086
  (cd "$debs" && rm -f ./*.deb && apt-get download $pkgs >/dev/null 2>&1) || die "apt-get download of $pkgs failed"
  local tmp deb; tmp=$(mktemp -d "$CACHE/qemu.XXXX")
  for deb in "$debs"/*.deb; do dpkg-deb -x "$deb" "$tmp"; done
  rm -rf "$QEMU_DIR"; mv "$tmp" "$QEMU_DIR"; rm -rf "$debs"
}

# --------------------------------------------------------------------------------- the image
# The unit that runs the checks after boot: it mounts the shares, runs the repository's
# tests/vm/guest.sh, and powers the VM off whatever happened.
ENTRY='#!/bin/sh
# The repository path on the host, given on the kernel command line (inplaced.repo=...).
repo=$(tr " " "\n" </proc/cmdline | sed -n "s/^inplaced.repo=//p")
modprobe 9pnet_virtio; modprobe 9p
mkdir -p /mnt/out "$repo"
if ! mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 out /mnt/out; then
  echo "vm-entry: the out share did not mount" >/dev/ttyS0; systemctl poweroff; exit 1
fi
if ! mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,ro repo "$repo"; then
  echo "vm-entry: the repo share did not mount at $repo" >/mnt/out/entry-error; systemctl poweroff; exit 1
fi
echo "vm-entry: booted in $(cut -d" " -f1 /proc/uptime) s, running guest.sh" >/dev/ttyS0
INPLACED_REPO=$repo "$repo/tests/vm/guest.sh" >/mnt/out/guest.log 2>&1
echo "vm-entry: guest.sh exited $?" >/dev/ttyS0
sync
systemctl poweroff'
UNIT='[Unit]
Description=inplaced VM checks (tests/vm/guest.sh)
After=multi-user.target containerd.service
[Service]
Type=oneshot
ExecStart=/usr/local/sbin/inplaced-vm-entry
StandardOutput=tty
TTYPath=/dev/ttyS0
[Install]
WantedBy=multi-user.target'

# containerd as a kubeadm node configures it: the CRI plugin with runc's systemd cgroup driver.
CONTAINERD_CONFIG='version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/pause:local"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = true'

# containerd 2.1 (Debian sid's, config version 3) carried beside Debian 12's 1.6, for the
# end-to-end part that guest.sh runs on both: production cgroup v2 nodes run 1.7 and 2.x. Not
# started at boot; guest.sh switches containerd.service to it with a drop-in.
CONTAINERD21_CONFIG='version = 3
root = "/var/lib/containerd-2.1"
state = "/run/containerd-2.1"
[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "localhost/pause:local"
[plugins."io.containerd.cri.v1.runtime".containerd]
  default_runtime_name = "runc"
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
      SystemdCgroup = true'
CONTAINERD21=

build_rootfs() {
  local root=$1
  mmdebstrap --quiet --variant=minbase --include="$PACKAGES" \
    --customize-hook='echo inplaced-vm > "$1/etc/hostname"' \
    --customize-hook='printf "127.0.0.1 localhost\n127.0.1.1 inplaced-vm\n" > "$1/etc/hosts"' \
    --customize-hook='echo "/dev/vda / ext4 rw,errors=remount-ro 0 1" > "$1/etc/fstab"' \
    --customize-hook='chroot "$1" systemctl mask serial-getty@ttyS0.service getty@tty1.service systemd-timesyncd.service apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer 2>/dev/null || true' \
    "$SUITE" "$root" >&2
  mkdir -p "$root/usr/local/sbin" "$root/etc/containerd"
  printf '%s\n' "$ENTRY" > "$root/usr/local/sbin/inplaced-vm-entry"
  chmod 755 "$root/usr/local/sbin/inplaced-vm-entry"
  printf '%s\n' "$UNIT" > "$root/etc/systemd/system/inplaced-vm-test.service"
  ln -sf /etc/systemd/system/inplaced-vm-test.service "$root/etc/systemd/system/multi-user.target.wants/inplaced-vm-test.service"
  printf '%s\n' "$CONTAINERD_CONFIG" > "$root/etc/containerd/config.toml"
  mkdir -p "$root/opt/containerd-2.1/bin"
  cp "$CONTAINERD21"/usr/bin/* "$root/opt/containerd-2.1/bin/"
  printf '%s\n' "$CONTAINERD21_CONFIG" > "$root/etc/containerd/config-2.1.toml"
}

# The cache key: everything the image is made of (the packages come from the suite as it is
# today; a new key is taken when the recipe changes, not when Debian publishes an update).
recipe_hash() {
  { echo "$PACKAGES $SUITE"; echo "$ENTRY"; echo "$UNIT"; echo "$CONTAINERD_CONFIG"
    echo "$CONTAINERD21_CONFIG"; "$CONTAINERD21/usr/bin/containerd" --version; declare -f build_rootfs; } |
    sha256sum | cut -c1-16
}

IMAGE_DIR=
build_image() {
  IMAGE_DIR=$CACHE/image-$(recipe_hash)
  if [ -f "$IMAGE_DIR/rootfs.ext4" ] && [ -f "$IMAGE_DIR/vmlinuz" ] && [ -f "$IMAGE_DIR/initrd.img" ]; then
    log "image $IMAGE_DIR (cached)"; return 0
  fi
  log "building the image with mmdebstrap (a few minutes)"
  local tmp; tmp=$(mktemp -d "$CACHE/build.XXXX")
  build_rootfs "$tmp/root" || { rm -rf "$tmp"; die "mmdebstrap failed"; }
  cp "$(ls "$tmp"/root/boot/vmlinuz-* | sort -V | tail -1)" "$tmp/vmlinuz"
  cp "$(ls "$tmp"/root/boot/initrd.img-* | sort -V | tail -1)" "$tmp/initrd.img"
  mkfs.ext4 -q -F -L root -d "$tmp/root" "$tmp/rootfs.ext4" 3G || { rm -rf "$tmp"; die "mkfs.ext4 -d failed"; }
  rm -rf "$tmp/root"
  # Older images of other recipes go: one is kept.
  rm -rf "$CACHE"/image-*
  mv "$tmp" "$IMAGE_DIR"
  log "image built: $(du -sh "$IMAGE_DIR" | cut -f1) in $IMAGE_DIR"
}

mkdir -p "$CACHE"
install_mmdebstrap
fetch_qemu
CONTAINERD21=$(INPLACED_CONTAINERD=2.1 tests/node/containerd.sh fetch) || die "cannot fetch containerd 2.1"
build_image
if [ "${1:-}" = --image-only ]; then exit 0; fi

# ------------------------------------------------------------------------------ what to test
rm -rf "$OUT"; mkdir -p "$OUT"
if [ "${1:-}" != --no-build ]; then packaging/build-packages.sh >&2; fi
ls target/packages/inplaced_*_amd64.deb >/dev/null 2>&1 || die "no .deb in target/packages (run without --no-build)"
log "building the node sandbox and the end-to-end tests the guest runs"
cargo build --locked -q -p node-sandbox --bin node-sandbox
# "<test target> <executable>" per line, for tests/vm/guest.sh.
cargo test --locked -q --no-run --message-format=json \
  --test resize_e2e --test recreate_e2e --test containermeta_e2e --test restart_request_e2e |
  python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["name"], m["executable"])' > "$OUT/test-binaries"
[ "$(wc -l < "$OUT/test-binaries")" = 4 ] || die "expected four test binaries, got: $(cat "$OUT/test-binaries")"

# ------------------------------------------------------------------------------------ boot
log "booting (accel $ACCEL, timeout ${TIMEOUT}s); serial console in $OUT/console.log"
set +e
timeout --kill-after=10 "$TIMEOUT" env LD_LIBRARY_PATH="$QEMU_DIR/usr/lib/x86_64-linux-gnu:$QEMU_DIR/lib/x86_64-linux-gnu" \
  "$QEMU_DIR/usr/bin/qemu-system-x86_64" \
  -L "$QEMU_DIR/usr/share/qemu" -L "$QEMU_DIR/usr/share/seabios" \
  -accel "$ACCEL" -m 3072 -smp 2 -display none -monitor none -no-reboot \
  -serial "file:$OUT/console.log" \
  -kernel "$IMAGE_DIR/vmlinuz" -initrd "$IMAGE_DIR/initrd.img" \
  -append "root=/dev/vda rw console=ttyS0 panic=-1 inplaced.repo=$REPO" \
  -drive "file=$IMAGE_DIR/rootfs.ext4,format=raw,if=virtio,snapshot=on" \
  -virtfs "local,path=$REPO,mount_tag=repo,security_model=none,readonly=on" \
  -virtfs "local,path=$OUT,mount_tag=out,security_model=none" \
  -nic none
rc=$?
set -e
[ "$rc" = 124 ] || [ "$rc" = 137 ] && { tail -20 "$OUT/console.log" >&2; die "the VM did not power off within ${TIMEOUT}s"; }
[ "$rc" = 0 ] || { tail -20 "$OUT/console.log" >&2; die "qemu exited $rc"; }
log "powered off"
[ -f "$OUT/guest.log" ] || { tail -30 "$OUT/console.log" >&2; die "the guest wrote no log ($(cat "$OUT/entry-error" 2>/dev/null))"; }
cat "$OUT/guest.log"
[ -f "$OUT/result" ] || die "the guest wrote no result (guest.sh did not finish: $OUT/guest.log)"
read -r passed failed < "$OUT/result"
log "done; the guest's files are in $OUT"
echo "vm: $passed passed, $failed failed"
[ "$failed" = 0 ] && [ "$passed" -gt 0 ]
