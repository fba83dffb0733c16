#!/usr/bin/env bash
# Prepares a fresh Debian 12 machine (as root) to build and test bosun:
# installs the system packages the tests use, checks the preinstalled Rust
# toolchain, stops the package-started registry/containerd services (tests
# start their own instances), builds the offline test images into
# ./test-images (critest's in ./test-images/critest) and the VM lane's guest image
# (hack/vm). Safe to run again.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=hack/apt-mirror.sh
. "$ROOT/hack/apt-mirror.sh"

PACKAGES=(
  build-essential pkg-config curl ca-certificates git
  runc
  crun            # a second runtime handler (issue 29); unusable on a cgroup v1 host, reported
  criu            # CheckpointContainer (issue 29); `criu check` fails on some kernels (6.18's vDSO): reported, trials SKIP
  busybox          # the dynamic one; it conflicts with busybox-static
  docker-registry
  apache2-utils    # htpasswd
  zstd python3 iproute2 iptables psmisc procps util-linux
  containerd       # benchmark peer
  containernetworking-plugins  # CNI config tests (conf dir) and containerd's network in the pods bench
  nftables        # nft: the tests read bosun's nftables table (bosun itself speaks netlink)
  jq
  attr            # getfattr, to check unpacked xattrs
  openssl         # throwaway CA for the TLS registry test
  python3-venv    # the venv for grpcio (a grpc-core client in the hostile-input tests)
  mmdebstrap      # the VM lane's guest image (hack/vm/image.sh)
  skopeo          # archives as skopeo writes them, for the ctr import tests
)
# The VM lane boots its guest with qemu (TCG: no KVM needed). qemu-system-x86 must come from the
# suite qemu-utils came from, if it is installed (bookworm-backports on some machines).
VM_PACKAGES=(qemu-system-x86)

# A grpc-core client (Python grpcio from PyPI) for the tests: grpc-core sends the CRI socket
# path percent-encoded as :authority, which must be accepted (issue 16).
GRPCIO_VERSION=1.85.3

if [ "$(id -u)" -ne 0 ]; then
  echo "setup: must run as root" >&2
  exit 1
fi

echo "setup: installing packages: ${PACKAGES[*]}"
apt-get update
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${PACKAGES[@]}"
qemu_suite=()
if dpkg-query -W -f '${Version}' qemu-utils 2>/dev/null | grep -q '~bpo'; then
  qemu_suite=(-t bookworm-backports)
  # A machine can carry backports' qemu-utils without the suite in its sources: add it (the
  # mirror its bookworm entry uses, the same keyring) so qemu-system-x86 can match it.
  if ! apt-cache policy 2>/dev/null | grep -q 'bookworm-backports'; then
    mirror=$(debian_mirror bookworm) || { echo "setup: cannot add bookworm-backports" >&2; exit 1; }
    echo "setup: adding bookworm-backports ($mirror) to apt's sources for qemu-system-x86"
    cat >/etc/apt/sources.list.d/bosun-backports.sources <<SRC
Types: deb
URIs: $mirror
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    apt-get update
  fi
fi
echo "setup: installing the VM lane's packages: ${VM_PACKAGES[*]} ${qemu_suite[*]}"
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${qemu_suite[@]}" "${VM_PACKAGES[@]}"

if ! command -v cargo >/dev/null 2>&1 && [ -x "${HOME:-/root}/.cargo/bin/cargo" ]; then
  export PATH="${HOME:-/root}/.cargo/bin:$PATH"
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo is not on PATH; the Rust toolchain must be preinstalled (rustup cannot be downloaded here)" >&2
  exit 1
fi

# Tests start their own registry and containerd: stop what the packages started.
systemctl disable --now docker-registry containerd 2>/dev/null || true
if [ ! -d /run/systemd/system ]; then
  for svc in docker-registry containerd; do
    if [ -x "/etc/init.d/$svc" ]; then
      "/etc/init.d/$svc" stop >/dev/null 2>&1 || true
    fi
  done
fi

cd "$ROOT"
venv="$ROOT/target/grpcio-venv"
if ! "$venv/bin/python" -c "import grpc; assert grpc.__version__ == '$GRPCIO_VERSION'" 2>/dev/null; then
  echo "setup: installing grpcio $GRPCIO_VERSION into $venv"
  if ! { /usr/bin/python3 -m venv "$venv" &&
         "$venv/bin/pip" install --quiet --disable-pip-version-check "grpcio==$GRPCIO_VERSION"; }; then
    rm -rf "$venv"
    echo "setup: WARNING: grpcio could not be installed; cri::hostile::grpc_core_client_* will SKIP" >&2
  fi
fi
# The grpc.health.v1 server of the grpc-health test image (grpc probe tests and examples/grpc.yaml).
cargo build --release --example grpc-health
python3 hack/testimages.py build --out test-images
# critest's images (the VM lane runs critest): their nginx is Debian's, fetched, never installed.
if ! ls target/debs/nginx_*.deb >/dev/null 2>&1; then
  mkdir -p target/debs
  (cd target/debs && apt-get download nginx)
fi
python3 hack/testimages.py build-critest --out test-images/critest
# The VM lane's guest (Debian 12, systemd, cgroup v2), cached under /var/cache/bosun-vm.
vm_image=$(bash hack/vm/image.sh)

images=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["images"]))' test-images/manifest.json)
echo "setup: ok: packages installed, $(cargo --version), $images test images in $ROOT/test-images, VM lane image $vm_image"
