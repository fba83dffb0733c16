#!/usr/bin/env bash
# Builds (once) and caches a kind-style node image with bosun in containerd's place, offline
# from Debian's packages and the freshly built bosun binary: Debian 12, systemd as PID 1, bosun
# and its unit (Type=notify, enabled), runc, crun, the CNI plugins, /etc/crictl.yaml, the `ctr`
# link, containerd's socket path (extra_sockets). No Kubernetes binaries: a test mounts the
# kubelet and crictl in (docs/kind.md says how to start from kindest/node instead).
#
#   hack/kind/build.sh [BOSUN_BINARY]      (default: target/debug/bosun, built by cargo build)
#
# Prints the path of the image: a docker-archive tar (`podman load -i`, `docker load -i`)
# tagged localhost/bosun-node:dev. The cache key is this directory's files and the binary's
# hash, so a rebuilt bosun makes a new image (the Debian part is cached apart: one mmdebstrap
# per change of this script's package list). Env: BOSUN_KIND_CACHE (default
# /var/cache/bosun-kind), BOSUN_VM_MIRROR / BOSUN_VM_SECURITY_MIRROR as for hack/vm/image.sh,
# TMPDIR for scratch (default /var/tmp).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
# shellcheck source=hack/apt-mirror.sh
. "$HERE/../apt-mirror.sh"
CACHE="${BOSUN_KIND_CACHE:-/var/cache/bosun-kind}"
BIN="$(readlink -f "${1:-${CARGO_TARGET_DIR:-$REPO/target}/debug/bosun}")"

# What a kind node has besides containerd and the Kubernetes binaries (kubeadm's preflight
# looks for conntrack, socat, ethtool, iptables).
PACKAGES=(
  systemd systemd-sysv dbus kmod
  runc crun containernetworking-plugins
  iproute2 iptables nftables conntrack socat ethtool
  procps util-linux mount ca-certificates curl
)

die() { echo "kind image: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "must run as root (mmdebstrap)"
command -v mmdebstrap >/dev/null || die "mmdebstrap is not installed (hack/setup.sh installs it)"
[ -x "$BIN" ] || die "no bosun binary at $BIN (cargo build first)"

base_key=$(printf '%s\n' "${PACKAGES[@]}" | cat - "$HERE/base.hooks" | sha256sum | cut -c1-16)
key=$(cat "$HERE"/* "$REPO/contrib/systemd/bosun.service" "$REPO/contrib/crictl.yaml" "$BIN" | sha256sum | cut -c1-16)
out="$CACHE/node-$key.tar"
if [ -f "$out" ]; then echo "$out"; exit 0; fi

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
if [ -f "$out" ]; then echo "$out"; exit 0; fi
exec 3>&1 1>&2
started=$(date +%s)

# The Debian part: one root file system tar per package list, reused across bosun builds.
base="$CACHE/base-$base_key.tar"
if [ ! -f "$base" ]; then
  MIRROR="${BOSUN_VM_MIRROR:-}" SECURITY="${BOSUN_VM_SECURITY_MIRROR:-}"
  [ -n "$MIRROR" ] || MIRROR=$(debian_mirror bookworm) || die "set BOSUN_VM_MIRROR"
  [ -n "$SECURITY" ] || SECURITY=$(debian_mirror bookworm-security) || die "set BOSUN_VM_SECURITY_MIRROR"
  echo "kind image: mmdebstrap of the node's Debian 12 ($base_key)" >&2
  include=$(IFS=,; echo "${PACKAGES[*]}")
  hooks=()
  while IFS= read -r h; do
    case "$h" in '' | '#'*) continue ;; esac
    hooks+=("--customize-hook=$h")
  done <"$HERE/base.hooks"
  SOURCE_DATE_EPOCH=1700000000 mmdebstrap --mode=root --variant=apt --include="$include" \
    --format=tar --aptopt='Acquire::Retries "3"' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    "${hooks[@]}" \
    bookworm "$base.tmp" \
    "deb $MIRROR bookworm main" "deb $MIRROR bookworm-updates main" \
    "deb $SECURITY bookworm-security main"
  mv "$base.tmp" "$base"
fi

# bosun on top (a second layer): the binary, its unit enabled, its config, the ctr link.
# Without debug info (a debug build is mostly that: 300 MB less to load into a node).
scratch=$(mktemp -d "${TMPDIR:-/var/tmp}/bosun-kind.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
objcopy --strip-debug "$BIN" "$scratch/bosun"
python3 "$HERE/archive.py" "$base" "$scratch/bosun" "$REPO" "$out.tmp"
mv "$out.tmp" "$out"
# Older node images of this cache are not needed any more.
find "$CACHE" -maxdepth 1 -name 'node-*.tar' ! -name "node-$key.tar" -delete
echo "kind image: built node-$key in $(( $(date +%s) - started )) s ($(du -sh "$out" | cut -f1))" >&2
echo "$out" >&3
