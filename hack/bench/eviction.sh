#!/usr/bin/env bash
# Node-pressure eviction figures of the standalone supervisor (issue 14), on this machine:
#  1. reaction time: from an instantaneous threshold crossing (fallocate on the daemon's root,
#     a tmpfs, past a nodefs.available threshold) to the daemon acting on it (its "eviction
#     threshold met" log line), with a 1 s housekeeping interval; ROUNDS rounds.
#  2. the daemon's CPU cost of monitoring with PODS running supervised pods: utime+stime of
#     the daemon over WINDOW seconds with eviction on (1 s housekeeping), off (restarted with
#     every threshold off: the pods are adopted, nothing else changes), and on again.
# usage: sudo hack/bench/eviction.sh [--pods N] [--rounds N] [--window SECS] [--bosun PATH]
# Needs root, runc and test-images (hack/setup.sh). Leaves nothing behind (trap).
set -euo pipefail

PODS=100 ROUNDS=10 WINDOW=60
BOSUN=${BOSUN:-target/debug/bosun}
while [ $# -gt 0 ]; do
  case $1 in
    --pods) PODS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --window) WINDOW=$2; shift 2 ;;
    --bosun) BOSUN=$2; shift 2 ;;
    *) echo "usage: $0 [--pods N] [--rounds N] [--window SECS] [--bosun PATH]" >&2; exit 2 ;;
  esac
done
BOSUN=$(realpath "$BOSUN")
IMAGES=$(realpath test-images)
RUNC=$(command -v runc || echo /usr/sbin/runc)
[ "$(id -u)" = 0 ] || { echo "needs root" >&2; exit 1; }

DIR=$(mktemp -d /var/tmp/bosun-bench-evict-XXXXXX)
NAME=$(basename "$DIR")
CG=/$NAME
SOCK=$DIR/bosun.sock
DAEMON=
mkdir -p "$DIR/root" "$DIR/manifests" "$DIR/cni"
mount -t tmpfs -o size=256m tmpfs "$DIR/root"

cleanup() {
  set +e
  if [ -n "$DAEMON" ] && kill -0 "$DAEMON" 2>/dev/null; then
    names=$("$BOSUN" --socket "$SOCK" pod get 2>/dev/null | awk 'NR>1 {print $1}')
    # shellcheck disable=SC2086
    [ -z "$names" ] || timeout 300 "$BOSUN" --socket "$SOCK" pod delete --grace-period 0 $names >/dev/null 2>&1
    kill "$DAEMON"; wait "$DAEMON" 2>/dev/null
  fi
  for c in $("$RUNC" --root "$DIR/state/runc" list -q 2>/dev/null); do
    "$RUNC" --root "$DIR/state/runc" delete --force "$c" >/dev/null 2>&1
  done
  for p in $(pgrep -f "$DIR"); do kill -9 "$p" 2>/dev/null; done
  grep " $DIR/" /proc/self/mountinfo | awk '{print $5}' | sort -r | while read -r m; do
    umount -l "$m" 2>/dev/null
  done
  umount -l "$DIR/root" 2>/dev/null
  for h in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
    [ -d "$h$NAME" ] && find "$h$NAME" -depth -type d -exec rmdir {} + 2>/dev/null
  done
  ip link del "bb${NAME: -6}" 2>/dev/null
  rm -rf "$DIR"
}
trap cleanup EXIT

config() { # $1: eviction_hard table
  cat >"$DIR/config.toml" <<EOF
runtime = "$RUNC"
default_cgroup_parent = "$CG"
[pod]
log_dir = "$DIR/pod-logs"
manifest_dir = "$DIR/manifests"
configmap_dir = "$DIR/configmaps"
secret_dir = "$DIR/secrets"
[node]
cgroup_root = "$CG"
priority_class_dir = "$DIR/priorityclasses"
max_pods = $((PODS + 10))
eviction_hard = $1
housekeeping_interval = "1s"
eviction_pressure_transition_period = "1s"
[network]
conf_dir = "$DIR/cni"
bridge = "bb${NAME: -6}"
subnet = "10.251.$((RANDOM % 250)).0/24"
data_dir = "$DIR/cni-data"
masquerade = false
default_route = false
EOF
}

start() {
  "$BOSUN" --socket "$SOCK" daemon --config "$DIR/config.toml" --root "$DIR/root" \
    --state "$DIR/state" --log-level info >>"$DIR/daemon.log" 2>&1 &
  DAEMON=$!
  for _ in $(seq 200); do
    "$BOSUN" --socket "$SOCK" version >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "daemon did not start:" >&2; tail -20 "$DIR/daemon.log" >&2; exit 1
}

pod() { # $1 name, $2 extra spec lines
  cat <<EOF
---
apiVersion: v1
kind: Pod
metadata: {name: $1}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
$2  containers:
  - name: main
    image: bosun.test/busybox:latest
    imagePullPolicy: Never
    command: [sleep, "36000"]
EOF
}

running() { "$BOSUN" --socket "$SOCK" pod get 2>/dev/null | awk '$3 == "Running"' | wc -l; }

cpu_ticks() { awk '{print $14 + $15}' "/proc/$DAEMON/stat"; }

# -- 1. reaction time ------------------------------------------------------------------------
config '{ "nodefs.available" = "128Mi" }'
start
"$BOSUN" --socket "$SOCK" image import --tag bosun.test/busybox:latest "$IMAGES/busybox.oci.tar" >/dev/null
# A critical pod: something to act for, never evicted, so every round sees the same node.
pod keeper "  priorityClassName: system-node-critical
" >"$DIR/keeper.yaml"
"$BOSUN" --socket "$SOCK" pod apply -f "$DIR/keeper.yaml" >/dev/null
until [ "$(running)" -ge 1 ]; do sleep 0.2; done
free_mib=$(df -m --output=avail "$DIR/root" | tail -1)
ballast=$((free_mib - 64))
echo "reaction: tmpfs root with ${free_mib} MiB free, threshold 128Mi, ballast ${ballast} MiB, housekeeping 1s"
sleep 2
times=()
for r in $(seq "$ROUNDS"); do
  seen=$(grep -c "eviction threshold met" "$DIR/daemon.log" || true)
  t0=$(date +%s.%N)
  fallocate -l "${ballast}M" "$DIR/root/ballast"
  until [ "$(grep -c "eviction threshold met" "$DIR/daemon.log" || true)" -gt "$seen" ]; do
    sleep 0.01
  done
  rm -f "$DIR/root/ballast"
  line=$(grep "eviction threshold met" "$DIR/daemon.log" | sed -n "$((seen + 1))p")
  t1=$(date -d "$(echo "$line" | awk '{print $1}')" +%s.%N)
  ms=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", (b - a) * 1000 }')
  times+=("$ms")
  printf '  round %2d: %6.0f ms\n' "$r" "$ms"
  sleep "1.$((RANDOM % 10))" # the next crossing lands anywhere in the housekeeping period
done
printf '%s\n' "${times[@]}" | sort -n | awk '{v[NR]=$1; s+=$1}
  END { printf "reaction (crossing -> acting), %d rounds: mean %.0f ms, median %.0f ms, max %.0f ms\n",
        NR, s/NR, v[int((NR+1)/2)], v[NR] }'

# -- 2. CPU cost of monitoring with PODS pods ------------------------------------------------
for i in $(seq "$PODS"); do pod "p$i" ""; done >"$DIR/pods.yaml"
t=$(date +%s)
"$BOSUN" --socket "$SOCK" pod apply -f "$DIR/pods.yaml" >/dev/null
until [ "$(running)" -ge $((PODS + 1)) ]; do sleep 2; done
echo "cpu: $((PODS + 1)) pods running after $(($(date +%s) - t)) s; settling 20 s"
sleep 20
hz=$(getconf CLK_TCK)
window() {
  local a b
  a=$(cpu_ticks); sleep "$WINDOW"; b=$(cpu_ticks)
  echo "$a $b" | awk -v hz="$hz" -v w="$WINDOW" '{ printf "%.3f", ($2 - $1) / hz / w * 100 }'
}
restart() { # $1: eviction_hard table; the pods are adopted, then left to settle
  kill -9 "$DAEMON"; wait "$DAEMON" 2>/dev/null || true
  config "$1"
  start
  until [ "$(running)" -ge $((PODS + 1)) ]; do sleep 1; done
  sleep 20
}
# on, off, on: the first window still sees the tail of the pods' start-up (shown, not counted);
# the two after a restart (pods adopted, settled) differ only in the housekeeping loop.
on1=$(window)
echo "cpu: eviction on, after the pods' start-up: ${on1} % of a core over ${WINDOW} s (not counted)"
restart '{}'
off=$(window)
echo "cpu: eviction off: ${off} % of a core over ${WINDOW} s"
restart '{ "nodefs.available" = "128Mi" }'
on2=$(window)
echo "cpu: eviction on again: ${on2} % of a core over ${WINDOW} s"
echo "$on2 $off" | awk -v hz="$hz" -v w="$WINDOW" '{ printf "cpu: monitoring costs %.3f %% of a core with '"$((PODS + 1))"' pods (resolution %.3f %%)\n", $1 - $2, 100 / hz / w }'
