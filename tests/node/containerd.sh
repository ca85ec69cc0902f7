#!/usr/bin/env bash
# containerd.sh — the real containerd (CRI plugin) + runc that inplaced's tests and sandbox talk to.
#
#   containerd.sh up       install packages when missing, build + import the images, write the
#                          project's config, start containerd in the background, wait for CRI.
#                          Idempotent: does nothing but check when it is already up.
#   containerd.sh down     stop every container and sandbox, stop containerd, unmount and remove
#                          its state, the pod cgroups under $INPLACED_TEST_CGROUP_ROOT. Idempotent.
#   containerd.sh stop-daemon / start-daemon
#                          stop only the containerd process (containers keep running, state is
#                          kept) and start it again: for tests of a runtime restart.
#   containerd.sh status   exit 0 when running; prints the endpoint.
#   containerd.sh endpoint print the CRI endpoint (unix://...).
#   containerd.sh images   only build the test images (an OCI layout tarball in the state
#                          directory) and print its path: for a containerd run by someone else
#                          (the VM of tests/vm imports it into the node's own containerd).
#   containerd.sh fetch    only fetch the release INPLACED_CONTAINERD names (1.7, 2.1) and print
#                          the directory it is unpacked in (the VM of tests/vm carries 2.1).
#
# Environment (optional):
#   INPLACED_CONTAINERD        the containerd release to run: 1.6 (default: Debian 12's package,
#                              installed with apt), 1.7 (Debian 13's) or 2.1 (Debian sid's); the
#                              newer ones are fetched with a private apt directory (the machine's own
#                              apt sources are never changed), unpacked under
#                              $INPLACED_TEST_RUNTIME_CACHE and run from there beside the system's
#                              containerd, never instead of it. runc is Debian 12's for all three.
#   INPLACED_TEST_RUNTIME_CACHE where fetched releases are kept (default /var/cache/inplaced-test)
#   INPLACED_TEST_CRI_BASE     state directory (default /run/inplaced-test); the socket lives in it,
#                              so keep it short (unix socket paths are limited to ~100 bytes)
#   INPLACED_TEST_CGROUP_ROOT  cgroup parent under which tests put pod cgroups (default inplaced-test)
#   INPLACED_TEST_CONTAINERD_EXTRA_CONFIG
#                              TOML appended to the written config (tests/run-matrix.sh uses it to
#                              check that a config the runtime rejects is one clear error)
#
# Facts this relies on are in docs/containerd.md: PID 1 is not systemd (we start
# containerd ourselves, cgroupfs driver), root lacks CAP_SYS_RESOURCE (restrict_oom_score_adj), no
# registry (images are built here from busybox-static and imported), one directory per containerd
# (INPLACED_TEST_CRI_BASE: socket, root, state and runc root; several may run side by side).
set -euo pipefail

RELEASE=${INPLACED_CONTAINERD:-1.6}
RUNTIME_CACHE=${INPLACED_TEST_RUNTIME_CACHE:-/var/cache/inplaced-test}
BASE=${INPLACED_TEST_CRI_BASE:-/run/inplaced-test}
CGROUP_ROOT=${INPLACED_TEST_CGROUP_ROOT:-inplaced-test}
PAUSE_IMAGE=localhost/pause:local
TEST_IMAGE=localhost/busybox:local
TEST_IMAGE_V2=localhost/busybox:local-v2
SOCK=$BASE/containerd.sock
PIDFILE=$BASE/containerd.pid
# The Debian suite each release is taken from, and where its binaries are.
case "$RELEASE" in
  1.6) SUITE=bookworm ;;
  1.7) SUITE=trixie ;;
  2.1) SUITE=sid ;;
  *) echo "containerd.sh: INPLACED_CONTAINERD=$RELEASE: choose 1.6, 1.7 or 2.1" >&2; exit 2 ;;
esac
bin_of() { if [ "$1" = 1.6 ]; then echo /usr/bin; else echo "$RUNTIME_CACHE/containerd-$1/usr/bin"; fi; }
# What is running now was started with the release recorded here: status, down, endpoint and the
# daemon restarts act on that one, whatever INPLACED_CONTAINERD says.
RUNNING_RELEASE=$(cat "$BASE/release" 2>/dev/null || echo 1.6)
BIN=$(bin_of "$RUNNING_RELEASE")
CTR=("$BIN/ctr" --address "$SOCK" -n k8s.io)

T0=$(date +%s%N)
log() { printf '[containerd.sh %5dms] %s\n' "$(( ($(date +%s%N) - T0) / 1000000 ))" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
running() { [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

install_packages() {
  local missing=() p
  for p in containerd runc busybox-static; do
    [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)" = "install ok installed" ] || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "apt-get install ${missing[*]}"
  apt-get update -qq
  # RUNLEVEL=1 keeps invoke-rc.d from starting the distribution's own containerd service.
  DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# containerd of a newer Debian suite: `apt-get download` through a private apt directory (its own
# sources, lists and archives), then `dpkg-deb -x` into the cache. Nothing is installed.
fetch_release() {
  [ "$RELEASE" = 1.6 ] && return 0
  local dir=$RUNTIME_CACHE/containerd-$RELEASE
  if [ -x "$dir/usr/bin/containerd" ]; then return 0; fi
  local apt=$RUNTIME_CACHE/apt-$SUITE
  mkdir -p "$apt/lists/partial" "$apt/archives/partial" "$apt/sources" "$apt/debs"
  printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: %s\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$SUITE" > "$apt/sources/$SUITE.sources"
  local opts=(-o "Dir::Etc::sourcelist=/dev/null" -o "Dir::Etc::sourceparts=$apt/sources"
    -o "Dir::State::lists=$apt/lists" -o "Dir::Cache::archives=$apt/archives"
    -o "APT::Get::List-Cleanup=0" -o "Debug::NoLocking=1")
  log "fetching containerd $RELEASE from Debian $SUITE"
  apt-get "${opts[@]}" update -qq >/dev/null 2>&1 || die "apt-get update of Debian $SUITE failed"
  local version
  version=$(apt-cache "${opts[@]}" madison containerd 2>/dev/null \
    | awk -v r="$RELEASE." '{v=$3} index(v, r) == 1 {print v; exit}')
  [ -n "$version" ] || die "Debian $SUITE has no containerd $RELEASE.x (it has: $(apt-cache "${opts[@]}" madison containerd 2>/dev/null | awk '{print $3}' | tr '\n' ' '))"
  rm -f "$apt/debs/"*.deb
  (cd "$apt/debs" && apt-get "${opts[@]}" download "containerd=$version" >/dev/null 2>&1) \
    || die "apt-get download containerd=$version failed"
  local tmp; tmp=$(mktemp -d "$RUNTIME_CACHE/unpack.XXXX")
  dpkg-deb -x "$apt/debs/"containerd_*.deb "$tmp"
  "$tmp/usr/bin/containerd" --version >/dev/null || die "containerd $version does not run here"
  rm -rf "$dir"; mv "$tmp" "$dir"
  log "containerd $version unpacked in $dir"
}

pick_snapshotter() {
  local d; d=$(mktemp -d "$BASE/ovl-probe.XXXX")
  mkdir -p "$d"/{l,u,w,m}
  if mount -t overlay overlay -o "lowerdir=$d/l,upperdir=$d/u,workdir=$d/w" "$d/m" 2>/dev/null; then
    umount "$d/m"; rm -rf "$d"; echo overlayfs
  else
    rm -rf "$d"; echo native
  fi
}

# runc cannot set the sandbox's oom_score_adj without CAP_SYS_RESOURCE (bit 24 of CapEff).
restrict_oom() {
  local eff; eff=$(awk '/^CapEff/{print $2}' /proc/self/status)
  if (( (16#$eff >> 24) & 1 )); then echo false; else echo true; fi
}

write_config() {
  mkdir -p "$BASE"/{root,state}
  if [ "$RELEASE" = 2.1 ]; then write_config_v3 "$@"; return; fi
  cat > "$BASE/config.toml" <<EOF
version = 2
root = "$BASE/root"
state = "$BASE/state"
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  restrict_oom_score_adj = $2
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "$1"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$BASE/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$BASE/cni/net.d"
EOF
}

# containerd 2.x: configuration version 3, the CRI plugin split in an images and a runtime part.
write_config_v3() {
  cat > "$BASE/config.toml" <<EOF
version = 3
root = "$BASE/root"
state = "$BASE/state"
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "$1"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "$PAUSE_IMAGE"
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = $2
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$BASE/runc"
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$BASE/cni/net.d"
EOF
}

# One OCI layout with three names: the test image and the sandbox image (the same busybox image),
# and the test image's v2 (that image plus a layer with /etc/inplaced-test-image = "v2"), so an
# image change in a pod's spec gives the kubelet a different image ID to run (CloneSet in-place
# image updates), still without a registry.
# Built reproducibly (sorted, mtime 0, gzip -n), so rebuilding gives the same digests.
build_images() {
  local w r v; w=$(mktemp -d "$BASE/img.XXXX"); r=$w/rootfs; v=$w/v2
  mkdir -p "$r"/{bin,dev,etc,proc,sys,root,var,run,usr/bin,sbin,tmp} "$v/etc" "$w/oci/blobs/sha256"
  chmod 1777 "$r/tmp"; chmod 700 "$r/root"; chmod 755 "$v" "$v/etc"
  cp /bin/busybox "$r/bin/busybox"
  local applet
  for applet in $(/bin/busybox --list); do [ "$applet" = busybox ] || ln -s busybox "$r/bin/$applet"; done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' > "$r/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' > "$r/etc/group"
  printf 'v2\n' > "$v/etc/inplaced-test-image"; chmod 644 "$v/etc/inplaced-test-image"
  put() { local d; d=$(sha256sum < "$1" | cut -d' ' -f1); cp "$1" "$w/oci/blobs/sha256/$d"; echo "$d $(stat -c %s "$1")"; }
  # layer DIR NAME: DIR as a gzipped layer blob; prints its diff ID, digest and size.
  layer() {
    tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$1" -cf "$w/$2.tar" .
    gzip -n -c "$w/$2.tar" > "$w/$2.tgz"
    echo "$(sha256sum < "$w/$2.tar" | cut -d' ' -f1) $(put "$w/$2.tgz")"
  }
  # manifest "DIFFID DIGEST SIZE"...: the config and manifest blobs of an image of those layers
  # (bottom first); prints the manifest's digest and size.
  manifest() {
    local diffids="" layers="" l diffid digest size cfg csize
    for l in "$@"; do
      read -r diffid digest size <<<"$l"
      diffids+="${diffids:+,}\"sha256:$diffid\""
      layers+="${layers:+,}{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar+gzip\",\"digest\":\"sha256:$digest\",\"size\":$size}"
    done
    printf '{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],"Cmd":["/bin/sleep","infinity"],"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":[%s]},"history":[{"created_by":"inplaced tests/node/containerd.sh from busybox-static"}]}' "$diffids" > "$w/config.json"
    read -r cfg csize < <(put "$w/config.json")
    printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[%s]}' "$cfg" "$csize" "$layers" > "$w/manifest.json"
    put "$w/manifest.json"
  }
  local base v2 man msize man2 msize2
  base=$(layer "$r" base); v2=$(layer "$v" v2)
  read -r man msize < <(manifest "$base")
  read -r man2 msize2 < <(manifest "$base" "$v2")
  local entries="" name digest size
  for name in "$TEST_IMAGE" "$PAUSE_IMAGE" "$TEST_IMAGE_V2"; do
    if [ "$name" = "$TEST_IMAGE_V2" ]; then digest=$man2 size=$msize2; else digest=$man size=$msize; fi
    entries+="${entries:+,}{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"sha256:$digest\",\"size\":$size,\"platform\":{\"architecture\":\"amd64\",\"os\":\"linux\"},\"annotations\":{\"io.containerd.image.name\":\"$name\",\"org.opencontainers.image.ref.name\":\"${name##*:}\"}}"
  done
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[%s]}' "$entries" > "$w/oci/index.json"
  printf '{"imageLayoutVersion":"1.0.0"}' > "$w/oci/oci-layout"
  tar -C "$w/oci" -cf "$BASE/images.tar" oci-layout index.json blobs
  rm -rf "$w"
}

start_containerd() {
  # Own session and no inherited stdio: containerd must outlive this shell and not hold its pipes.
  # The release's own directory first: containerd finds its shim on PATH.
  PATH=$BIN:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    setsid nohup "$BIN/containerd" --config "$BASE/config.toml" >>"$BASE/containerd.log" 2>&1 </dev/null &
  echo $! > "$PIDFILE"
  local _
  for _ in $(seq 1 300); do
    "${CTR[@]}" version >/dev/null 2>&1 && break
    running || { tail -20 "$BASE/containerd.log" >&2; die "containerd exited"; }
    sleep 0.1
  done
  # grep reads to the end (no -q): with pipefail, a grep that exits at the first match can
  # leave ctr to die of SIGPIPE and fail the pipeline.
  "${CTR[@]}" plugins ls 2>/dev/null | grep -E '^io\.containerd\.grpc\.v1 +cri +\S+ +ok' >/dev/null \
    || { tail -20 "$BASE/containerd.log" >&2; die "the CRI plugin of containerd $RUNNING_RELEASE did not load (config $BASE/config.toml)"; }
}

up() {
  [ "$(id -u)" = 0 ] || die "must run as root"
  if running; then
    [ "$RUNNING_RELEASE" = "$RELEASE" ] \
      || die "containerd $RUNNING_RELEASE is up in $BASE; run '$0 down' before starting $RELEASE there"
    log "containerd already running (pid $(cat "$PIDFILE"))"; echo "unix://$SOCK"; return 0
  fi
  # Several run side by side (the suite's, and one per real test node), each with its own
  # directory: socket, root, state and runc root (below, in the config) all live in it.
  if pgrep -f -- "--config $BASE/config.toml" >/dev/null; then
    die "a containerd with $BASE/config.toml is running without its pid file (pid $(pgrep -f -- "--config $BASE/config.toml" | tr '\n' ' ')); stop it first"
  fi
  mkdir -p "$BASE"
  install_packages
  fetch_release
  RUNNING_RELEASE=$RELEASE
  BIN=$(bin_of "$RELEASE")
  CTR=("$BIN/ctr" --address "$SOCK" -n k8s.io)
  echo "$RELEASE" > "$BASE/release"
  local snapshotter; snapshotter=$(pick_snapshotter)
  write_config "$snapshotter" "$(restrict_oom)"
  if [ -n "${INPLACED_TEST_CONTAINERD_EXTRA_CONFIG:-}" ]; then
    printf '%b\n' "$INPLACED_TEST_CONTAINERD_EXTRA_CONFIG" >> "$BASE/config.toml"
  fi
  build_images
  start_containerd
  "${CTR[@]}" images import --snapshotter "$snapshotter" "$BASE/images.tar" >/dev/null
  local listed name; listed=$("${CTR[@]}" images ls -q)
  for name in "$TEST_IMAGE" "$PAUSE_IMAGE" "$TEST_IMAGE_V2"; do
    grep -qx "$name" <<<"$listed" || die "image import failed: no $name"
  done
  log "containerd $("$BIN/containerd" --version | awk '{print $3}') pid $(cat "$PIDFILE"), snapshotter $snapshotter: unix://$SOCK"
  echo "unix://$SOCK"
}

# Pod cgroups are made by runc under each controller but never removed by containerd.
remove_pod_cgroups() {
  local controller dir
  for controller in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
    dir=$controller$CGROUP_ROOT
    [ -d "$dir" ] || continue
    find "$dir" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
}

stop_daemon() {
  running || die "containerd is not running"
  local pid; pid=$(cat "$PIDFILE")
  kill "$pid"
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
  if kill -0 "$pid" 2>/dev/null; then log "containerd did not stop on SIGTERM: SIGKILL"; kill -9 "$pid"; fi
  rm -f "$PIDFILE"
}

down() {
  if running; then
    local id pid
    for id in $("${CTR[@]}" tasks ls -q 2>/dev/null); do
      "${CTR[@]}" tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
    done
    for id in $("${CTR[@]}" tasks ls -q 2>/dev/null); do
      "${CTR[@]}" tasks delete -f "$id" >/dev/null 2>&1 || true
    done
    pid=$(cat "$PIDFILE")
    stop_daemon
    log "containerd (pid $pid) stopped"
  fi
  # Leftover shims of containers we started (they outlive containerd by design).
  local shim
  for shim in $(pgrep -f "containerd-shim-runc-v2 .*-address $SOCK" 2>/dev/null || true); do
    kill -9 "$shim" 2>/dev/null || true
  done
  if [ -d "$BASE" ]; then
    awk -v b="$BASE/" 'index($5, b) == 1 {print $5}' /proc/self/mountinfo | sort -r | while read -r m; do
      umount -l "$m" 2>/dev/null || true
    done
    rm -rf "$BASE"
  fi
  remove_pod_cgroups
}

case "${1:-up}" in
  up) up ;;
  down) down ;;
  stop-daemon) stop_daemon ;;
  start-daemon) running || start_containerd ;;
  status) if running; then echo "running pid $(cat "$PIDFILE") containerd $RUNNING_RELEASE unix://$SOCK"; else echo stopped; exit 1; fi ;;
  release) if running; then echo "$RUNNING_RELEASE"; else echo stopped; exit 1; fi ;;
  endpoint) echo "unix://$SOCK" ;;
  images) mkdir -p "$BASE"; build_images; echo "$BASE/images.tar" ;;
  fetch) [ "$RELEASE" != 1.6 ] || die "fetch: containerd 1.6 is Debian 12's package"
    mkdir -p "$RUNTIME_CACHE"; fetch_release; echo "$RUNTIME_CACHE/containerd-$RELEASE" ;;
  *) echo "usage: $0 up|down|stop-daemon|start-daemon|status|release|endpoint|images" >&2; exit 2 ;;
esac
