#!/usr/bin/env bash
# Builds (once) and caches the VM lane's guest: a Debian 12 root filesystem made with mmdebstrap
# from Debian's packages (systemd as PID 1, runc, CNI plugins, the registry the tests start),
# as an ext4 image plus the kernel and initrd to boot it with. Prints the cache directory
# (rootfs.img, vmlinuz, initrd.img). The cache key is this script and the guest files, so a
# change to either builds a new image; older images are removed after a successful build.
#
# Env: BOSUN_VM_CACHE (default /var/cache/bosun-vm), BOSUN_VM_MIRROR and
# BOSUN_VM_SECURITY_MIRROR (default: the URIs this machine's apt sources give for bookworm and
# bookworm-security), TMPDIR for the build's scratch (default /var/tmp).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/apt-mirror.sh
. "$HERE/../apt-mirror.sh"
CACHE="${BOSUN_VM_CACHE:-/var/cache/bosun-vm}"
MIRROR="${BOSUN_VM_MIRROR:-}"
SECURITY="${BOSUN_VM_SECURITY_MIRROR:-}"

# What the integration tests use inside the guest (the same roles as hack/setup.sh's list).
PACKAGES=(
  systemd systemd-sysv dbus kmod linux-image-amd64 initramfs-tools
  runc
  iproute2 iptables nftables containernetworking-plugins
  docker-registry apache2-utils openssl python3
  busybox psmisc procps util-linux mount attr tar zstd ca-certificates
  e2fsprogs   # mkfs.ext4: the tests that freeze a loop-mounted file system (Need::Freeze)
  crun        # the second runtime handler (issue 29)
  criu        # checkpoint/restore (issue 29): criu check passes on the guest's 6.1 kernel
  podman catatonit uidmap fuse-overlayfs slirp4netns   # kind-style node containers (issue 27)
  apparmor sudo  # apparmor_parser loads the runtime-default profile; critest loads its test profiles with sudo (issue 31)
)

die() { echo "vm image: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root (mmdebstrap, image ownership)"
command -v mmdebstrap >/dev/null || die "mmdebstrap is not installed (hack/setup.sh installs it)"
command -v mke2fs >/dev/null || die "mke2fs is not installed (e2fsprogs)"

key=$(cat "${BASH_SOURCE[0]}" "$HERE"/guest/* | sha256sum | cut -c1-16)
out="$CACHE/$key"
if [ -f "$out/ok" ]; then
  echo "$out"
  exit 0
fi

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
if [ -f "$out/ok" ]; then
  echo "$out"
  exit 0
fi

# Read only when building: a cached image needs no mirror.
[ -n "$MIRROR" ] || MIRROR=$(debian_mirror bookworm) || die "set BOSUN_VM_MIRROR"
[ -n "$SECURITY" ] || SECURITY=$(debian_mirror bookworm-security) ||
  die "set BOSUN_VM_SECURITY_MIRROR"

# Only the cache directory goes to stdout (the caller captures it); the build's chatter
# (mmdebstrap, mke2fs) goes to stderr.
exec 3>&1 1>&2
scratch=$(mktemp -d "${TMPDIR:-/var/tmp}/bosun-vm-build.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
root="$scratch/root"
started=$(date +%s)
echo "vm image: building $key in $scratch (mmdebstrap, a few minutes)" >&2

include=$(IFS=,; echo "${PACKAGES[*]}")
# A tiny initrd (only what finding the root disk needs: faster to load and unpack under TCG);
# the services the lane has no use for are masked (each costs seconds under TCG).
# podman (kind-node lane) keeps its network config out of /etc/cni/net.d, which bosun reads.
mmdebstrap --mode=root --variant=apt --include="$include" \
  --aptopt='Acquire::Retries "3"' \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --setup-hook='mkdir -p "$1/etc/initramfs-tools/conf.d"' \
  --setup-hook='printf "MODULES=list\nCOMPRESS=gzip\n" > "$1/etc/initramfs-tools/conf.d/bosun-vm"' \
  --customize-hook='printf "virtio_pci\nvirtio_blk\next4\n" >> "$1/etc/initramfs-tools/modules"' \
  --customize-hook='chroot "$1" update-initramfs -u -k all' \
  --customize-hook="copy-in $HERE/guest/bosun-vm-run /usr/local/sbin" \
  --customize-hook="copy-in $HERE/guest/bosun-vm-run.service /etc/systemd/system" \
  --customize-hook='chroot "$1" systemctl enable bosun-vm-run.service' \
  --customize-hook='chroot "$1" systemctl mask serial-getty@ttyS0.service getty@tty1.service \
      docker-registry.service e2scrub_reap.service e2scrub_all.timer apt-daily.timer apt-daily-upgrade.timer \
      man-db.timer fstrim.timer dpkg-db-backup.timer systemd-timesyncd.service' \
  --customize-hook='chroot "$1" systemctl mask podman.socket podman-restart.service podman-auto-update.timer' \
  --customize-hook='mkdir -p "$1/etc/containers/net.d" && mv "$1"/etc/cni/net.d/*podman* "$1/etc/containers/net.d/"' \
  --customize-hook='printf "[network]\nnetwork_config_dir = \"/etc/containers/net.d\"\n" > "$1/etc/containers/containers.conf"' \
  --customize-hook='echo bosun-vm > "$1/etc/hostname"' \
  --customize-hook='printf "127.0.1.1\tbosun-vm\n" >> "$1/etc/hosts"' \
  --customize-hook='echo "/dev/vda / ext4 rw,noatime 0 0" > "$1/etc/fstab"' \
  --customize-hook='rm -rf "$1/var/cache/apt/archives/"*.deb "$1/var/lib/apt/lists/"*' \
  bookworm "$root" \
  "deb $MIRROR bookworm main" "deb $MIRROR bookworm-updates main" \
  "deb $SECURITY bookworm-security main"

kernel=$(ls "$root"/boot/vmlinuz-* | sort -V | tail -n1)
initrd=$(ls "$root"/boot/initrd.img-* | sort -V | tail -n1)
[ -f "$kernel" ] && [ -f "$initrd" ] || die "no kernel/initrd in the guest's /boot"

mkdir -p "$out.tmp"
cp "$kernel" "$out.tmp/vmlinuz"
cp "$initrd" "$out.tmp/initrd.img"
# Sparse: the tests' images, containers and scratch dirs go to the per-boot snapshot overlay.
mke2fs -q -t ext4 -L bosun-vm -d "$root" -F "$out.tmp/rootfs.img" 8G
rm -rf "$out"
mv "$out.tmp" "$out"
touch "$out/ok"
# Older images (another key) are not needed any more, unless a run still boots one (run.sh
# holds a shared lock on its use.lock).
for old in "$CACHE"/*/; do
  old="${old%/}"
  [ "$old" = "$out" ] && continue
  if flock -n -x "$old/use.lock" true 2>/dev/null || [ ! -e "$old/use.lock" ]; then
    rm -rf "$old"
  fi
done
echo "vm image: built $key in $(( $(date +%s) - started )) s ($(du -sh --apparent-size "$out/rootfs.img" | cut -f1) apparent, $(du -sh "$out/rootfs.img" | cut -f1) used)" >&2
echo "$out" >&3
