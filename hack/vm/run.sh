#!/usr/bin/env bash
# The VM lane: runs a command inside a Debian 12 guest with systemd as PID 1 and cgroup v2,
# under qemu (TCG: no KVM needed), with the host's freshly built bosun, the integration test
# binary and the test images shared in, and returns its output and exit code.
#
#   hack/vm/run.sh [options] -- COMMAND [ARG...]
#
# In the guest the command runs as root in the repository (shared read-only at the same path
# as on the host), with `bosun-it` on PATH (the integration test binary: `bosun-it FILTER
# --test-threads 2`) and $BOSUN_IT naming it. The guest has no network route off the machine
# (no NIC at all: loopback only); files come in through 9p shares, output comes back on a
# virtio serial port, and the disk is a per-boot snapshot of the cached image (hack/vm/image.sh),
# so runs leave nothing behind and can share the image.
#
# Options:
#   --no-build        use the binaries already built (default: cargo builds bosun and the tests)
#   --no-tests        no integration test binary (a command that runs none, e.g. hack/kind/lane-test.sh):
#                     nothing is built, `bosun-it` is absent
#   --share PATH      also share PATH read-only at the same path (repeatable)
#   --env NAME=VALUE  set NAME in the guest (repeatable)
#   --mem MIB         guest memory (default 4096)
#   --cpus N          guest CPUs (default 2)
#   --timeout SECS    give up on the guest after SECS (default 3600)
#   --keep            keep the run dir (console log, output) and print its path
# Env: BOSUN_VM_ACCEL (default tcg; kvm where nested virtualization works),
# BOSUN_TEST_TIME_SCALE (default 4 under TCG, 1 under KVM: how much slower tests may be).
# Exit: the command's exit code; 125 when the lane itself failed (no qemu, image build, boot).
set -euo pipefail

# One function, read whole before it runs: editing this file during a run cannot derail it.
main() {

  HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  REPO="$(cd "$HERE/../.." && pwd)"

  build=1 tests=1 keep=0 mem=4096 cpus=2 timeout_secs=3600
  shares=() envs=()
  while [ $# -gt 0 ]; do
    case "$1" in
      --no-build) build=0 ;;
      --no-tests) tests=0 build=0 ;;
      --share) shares+=("$(readlink -f "$2")"); shift ;;
      --env) envs+=("$2"); shift ;;
      --mem) mem="$2"; shift ;;
      --cpus) cpus="$2"; shift ;;
      --timeout) timeout_secs="$2"; shift ;;
      --keep) keep=1 ;;
      --) shift; break ;;
      *) echo "vm: unknown option $1 (see the top of $0)" >&2; exit 125 ;;
    esac
    shift
  done
  [ $# -gt 0 ] || { echo "vm: no command (usage: hack/vm/run.sh [options] -- COMMAND...)" >&2; exit 125; }

  lane_fail() { echo "vm: $*" >&2; exit 125; }
  [ "$(id -u)" -eq 0 ] || lane_fail "must run as root"
  QEMU=$(command -v qemu-system-x86_64) || lane_fail "qemu-system-x86_64 is not installed (hack/setup.sh installs qemu-system-x86)"

  # The binaries under test, built now (the guest runs exactly what the host just built).
  cd "$REPO"
  it=
  if [ "$tests" -eq 0 ]; then
    :
  elif [ "$build" -eq 1 ]; then
    echo "vm: building bosun and the integration tests" >&2
    it=$(cargo test --locked --no-run --test integration --message-format=json-render-diagnostics |
      jq -r 'select(.reason == "compiler-artifact" and .target.name == "integration" and .profile.test) | .executable')
  else
    it=$(ls -t "${CARGO_TARGET_DIR:-target}"/debug/deps/integration-* 2>/dev/null | grep -v '\.d$' | head -n1 || true)
  fi
  [ "$tests" -eq 0 ] || { [ -n "$it" ] && [ -x "$it" ]; } || lane_fail "no integration test binary (build failed?)"

  image=$(bash "$HERE/image.sh") || lane_fail "guest image build failed"
  [ -f "$image/ok" ] || lane_fail "image.sh printed ${image:0:200}, not a built image's directory"
  exec 8>"$image/use.lock"
  flock -s 8

  run=$(mktemp -d "${TMPDIR:-/var/tmp}/bosun-vm-run.XXXXXX")
  qemu_pid=
  cleanup() {
    [ -n "$qemu_pid" ] && kill "$qemu_pid" 2>/dev/null
    if [ "$keep" -eq 1 ]; then echo "vm: run dir kept: $run" >&2; else rm -rf "$run"; fi
  }
  trap cleanup EXIT
  trap 'exit 130' INT TERM

  # Shares: the repo, the test images behind its symlink, the target dir if it lives elsewhere.
  shares+=("$REPO" "$(readlink -f "$REPO/test-images" 2>/dev/null || true)")
  [ -z "$it" ] || shares+=("$(readlink -f "$(dirname "$it")/../..")")
  mapfile -t shares < <(printf '%s\n' "${shares[@]}" | grep -v '^$' | sort -u | awk '
    { for (i = 1; i <= n; i++) if (index($0 "/", kept[i] "/") == 1) next; kept[++n] = $0; print }')

  accel="${BOSUN_VM_ACCEL:-tcg}"
  case "$accel" in
    tcg) accel_opts="tcg,thread=multi" default_scale=4 ;;
    kvm) accel_opts="kvm" default_scale=1 ;;
    *) lane_fail "BOSUN_VM_ACCEL=$accel: tcg or kvm" ;;
  esac

  sq() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }
  virtfs=()
  : >"$run/mounts"
  for i in "${!shares[@]}"; do
    [ -d "${shares[$i]}" ] || continue
    echo "s$i ${shares[$i]}" >>"$run/mounts"
    virtfs+=(-virtfs "local,path=${shares[$i]},mount_tag=s$i,security_model=none,readonly=on")
  done
  mkdir -p "$run/bin"
  printf '#!/bin/sh\nexec %s "$@"\n' "$(sq "$it")" >"$run/bin/bosun-it"
  chmod +x "$run/bin/bosun-it"
  {
    echo "export PATH=/run/bosun-vm/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    echo "export BOSUN_IT=$(sq "$it") HOME=/root TMPDIR=/var/tmp RUST_BACKTRACE=1"
    # TCG runs the guest several times slower: tests widen their own waits and upper bounds.
    echo "export BOSUN_TEST_TIME_SCALE=${BOSUN_TEST_TIME_SCALE:-$default_scale}"
    for e in "${envs[@]}"; do echo "export ${e%%=*}=$(sq "${e#*=}")"; done
  } >"$run/env"
  {
    echo "cd $(sq "$REPO")"
    printf 'exec'
    for a in "$@"; do printf ' %s' "$(sq "$a")"; done
    echo
  } >"$run/cmd"
  : >"$run/output"

  started=$(date +%s)
  echo "vm: booting $(basename "$image") ($accel, $cpus CPUs, $mem MiB); output follows" >&2
  # snapshot=on: guest writes go to a temp overlay (in TMPDIR), never to the cached image.
  TMPDIR="${TMPDIR:-/var/tmp}" "$QEMU" \
    -accel "$accel_opts" -cpu max -smp "$cpus" -m "$mem" \
    -display none -monitor none -no-reboot -nic none \
    -kernel "$image/vmlinuz" -initrd "$image/initrd.img" \
    -append "root=/dev/vda rw console=ttyS0 quiet mitigations=off panic=-1 systemd.unified_cgroup_hierarchy=1 systemd.show_status=false" \
    -drive "file=$image/rootfs.img,format=raw,if=virtio,snapshot=on,cache=unsafe" \
    -device virtio-rng-pci \
    -virtfs "local,path=$run,mount_tag=bosunrun,security_model=none" \
    "${virtfs[@]}" \
    -device virtio-serial-pci \
    -chardev "file,id=out,path=$run/output" -device virtserialport,chardev=out,name=bosun.out \
    -serial "file:$run/console.log" &
  qemu_pid=$!
  tail -F -n +1 --pid="$qemu_pid" "$run/output" 2>/dev/null &
  tail_pid=$!
  # The timer must neither outlive this script nor hold its output open (a `| tee` of this
  # script waits for every writer): its sleep goes with it, and it writes nowhere.
  (
    exec >/dev/null 2>&1
    sleep "$timeout_secs" &
    sleep_pid=$!
    trap 'kill "$sleep_pid"; exit 0' TERM
    wait "$sleep_pid"
    kill "$qemu_pid"
  ) &
  timer_pid=$!
  wait "$qemu_pid" || true
  qemu_pid=
  kill "$timer_pid" 2>/dev/null || true
  wait "$tail_pid" 2>/dev/null || true

  elapsed=$(( $(date +%s) - started ))
  if [ ! -s "$run/exit" ]; then
    echo "vm: the guest did not finish the command (after ${elapsed} s; timeout ${timeout_secs} s); console:" >&2
    tail -n 40 "$run/console.log" >&2 || true
    exit 125
  fi
  status=$(cat "$run/exit")
  echo "vm: exit $status after ${elapsed} s (boot, command, power-off)" >&2
  exit "$status"
}

main "$@"
