#!/usr/bin/env bash
# The kind-node test of the VM lane (issue 27): runs in the guest (cgroup v2, systemd), where
# Debian's podman runs the node image of hack/kind/build.sh the way kind's podman provider runs
# a node, once per cgroup driver, then checks bosun inside it and that removing the node
# leaves the guest as found.
#
#   hack/vm/run.sh --no-tests --share /var/cache/bosun-kind --share /work/shared/bin -- \
#     hack/kind/lane-test.sh [--drivers "systemd cgroupfs"] [--critest "systemd"] \
#     /var/cache/bosun-kind/node-<key>.tar [SHARED_BIN]
#
# --drivers: the nodes to run, one after the other: `systemd` is the image as built (bosun and
# the kubelet on the systemd driver, kind's default), `cgroupfs` the same image with bosun's
# config mounted over (`cgroup_driver = "cgroupfs"`) and the kubelet's `cgroupDriver: cgroupfs`.
# --critest: the drivers whose node also runs critest inside (hack/kind/lane-critest.sh; "" for
# none). SHARED_BIN (default ../shared/bin of the repository) holds crictl, the kubelet and
# critest ($BOSUN_CRITEST wins): they are mounted into the node (kindest/node ships its own).
# Without crictl the test says SKIP. Prints `test result:` lines as the cargo harness does, and
# the measured times.
set -uo pipefail

drivers="systemd cgroupfs"
critest_drivers="systemd"
while [ $# -gt 0 ]; do
  case "$1" in
    --drivers) drivers="$2"; shift 2 ;;
    --critest) critest_drivers="$2"; shift 2 ;;
    *) break ;;
  esac
done
IMAGE="${1:?usage: lane-test.sh [--drivers D] [--critest D] NODE_IMAGE_TAR [SHARED_BIN]}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SHARED="$(readlink -f "${2:-$REPO/../shared/bin}")"
SCALE="${BOSUN_TEST_TIME_SCALE:-1}"
NODE=bosun-node
SOCK=unix:///run/containerd/containerd.sock
passed=0 failed=0 skipped=0 critest_failed=0
export PYTHONDONTWRITEBYTECODE=1

log() { echo "kind-lane: $*"; }
pass() { log "ok $1"; passed=$((passed + 1)); }
fail() { log "FAILED $1: $2"; failed=$((failed + 1)); }
skip() { echo "SKIP kind::$1: $2"; skipped=$((skipped + 1)); }
result() {
  local s=ok
  [ "$failed" -eq 0 ] || s=FAILED
  echo "test result: $s. $passed passed; $failed failed; $skipped ignored; 0 measured; 0 filtered out (kind lane)"
  [ "$failed" -eq 0 ] && [ "$critest_failed" -eq 0 ]
}
in_node() { podman exec "$NODE" "$@"; }
# to_node PATH: stdin becomes PATH in the node.
to_node() { podman exec -i "$NODE" sh -c "mkdir -p \"\$(dirname '$1')\" && cat > '$1'"; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
# until TIMEOUT CMD...: runs CMD every half second until it succeeds (TIMEOUT scaled).
until_ok() {
  local deadline=$(( $(date +%s) + $1 * SCALE ))
  shift
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || return 1
    sleep 0.5
  done
}

if [ ! -x "$SHARED/crictl" ]; then
  skip node "no crictl in $SHARED (see /work/shared/bin/README.md)"
  result
  exit
fi
command -v podman >/dev/null || { skip node "podman is not installed in the guest"; result; exit; }
CRITEST="${BOSUN_CRITEST:-$SHARED/critest}"
[ -x "$CRITEST" ] || CRITEST=

# What the guest has before the node: the leak check compares against it. What podman keeps
# for itself once it has run a container (its bridge and firewall tables, its storage and
# netns mounts, machine.slice) is not the node's and is left out.
snapshot() {
  findmnt -rn -o TARGET | grep -v -x -e /var/lib/containers/storage/overlay -e /run/netns |
    sort >"$1.mounts"
  find /sys/fs/cgroup -mindepth 1 -type d | grep -v -x /sys/fs/cgroup/machine.slice | sort >"$1.cgroups"
  ip -o link | awk -F': ' '{ print $2 }' | sed 's/@.*//' | grep -v '^cni-podman' | sort >"$1.links"
  nft list tables 2>/dev/null | grep -v -x -E 'table ip6? (filter|nat|mangle)' | sort >"$1.nft"
}
work=$(mktemp -d)
snapshot "$work/before"
# shellcheck source=hack/kind/lane-kubelet.sh
. "$REPO/hack/kind/lane-kubelet.sh"
# shellcheck source=hack/kind/lane-critest.sh
. "$REPO/hack/kind/lane-critest.sh"
trap stop_registry EXIT

log "loading $IMAGE"
t_load=$(now)
podman load -q -i "$IMAGE" || { fail load "podman load"; result; exit 1; }
log "podman load: $(secs "$t_load" "$(now)") s"

# kind's podman provider: privileged, its own cgroup namespace, /tmp and /run on tmpfs, /var on
# a volume, the host's modules read-only; systemd as PID 1 (the image's /sbin/init).
run_node() {
  local bins=()
  [ -z "$CRITEST" ] || bins=(--volume "$(dirname "$CRITEST"):/opt/critest-bin:ro")
  podman run -d --name "$NODE" --hostname "$NODE" \
    --privileged --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
    --cgroupns=private --tmpfs /tmp --tmpfs /run "$@" \
    --volume /lib/modules:/lib/modules:ro \
    --volume "$SHARED/crictl:/usr/local/bin/crictl:ro" \
    --volume "$SHARED:/opt/shared-bin:ro" "${bins[@]}" \
    --volume "$(readlink -f "$REPO/test-images"):/test-images:ro" \
    localhost/bosun-node:dev
}

# One node on DRIVER: boot, the runtime's interfaces, the kubelet's pods, crictl's, critest.
node_test() {
  local D=$1 t0 t_bosun pod ctr ip ip2 pod2 node_pid node_cg sleeper sleeper_cg parent want
  local extra=(--volume /var)
  log "== node, cgroup driver $D"
  if [ "$D" = cgroupfs ]; then
    # The image's config, the driver changed: mounted over it before systemd starts bosun.
    sed 's/^cgroup_driver = .*/cgroup_driver = "cgroupfs"/' <<'T' >"$work/bosun-cgroupfs.toml"
cgroup_driver = "systemd"
extra_sockets = ["/run/containerd/containerd.sock"]
T
    extra+=(--volume "$work/bosun-cgroupfs.toml:/etc/bosun/config.toml:ro")
    parent=/kubepods/besteffort
  else
    parent=kubepods-besteffort.slice
  fi
  t0=$(now)
  run_node "${extra[@]}" >/dev/null || { fail "$D::node" "podman run"; return; }
  if until_ok 300 sh -c "podman exec $NODE systemctl is-active bosun | grep -qx active"; then
    t_bosun=$(now)
    pass "$D::unit_active"
  else
    fail "$D::unit_active" "bosun did not become active: $(in_node systemctl status bosun --no-pager 2>&1 | tail -n 20)"
  fi
  log "$D: node boot to bosun active (Type=notify, READY=1): $(secs "$t0" "${t_bosun:-$(now)}") s"
  in_node systemctl is-system-running 2>&1 | sed 's/^/kind-lane: node systemd: /'

  # crictl on containerd's socket path (extra_sockets); the driver bosun reports.
  if in_node crictl --runtime-endpoint "$SOCK" info >"$work/info" 2>&1 &&
    grep -q '"type": "RuntimeReady"' "$work/info" &&
    python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["status"]["conditions"]; sys.exit(not all(x["status"] for x in c))' "$work/info"; then
    pass "$D::crictl_info"
  else
    fail "$D::crictl_info" "$(head -c 2000 "$work/info")"
  fi
  # RuntimeConfig: the driver the kubelet (1.32: KubeletCgroupDriverFromCRI) takes from bosun.
  if in_node crictl runtime-config 2>&1 | grep -q -i "cgroup.*$D"; then
    pass "$D::runtime_config_driver"
  else
    fail "$D::runtime_config_driver" "$(in_node crictl runtime-config 2>&1 | head -c 400)"
  fi

  # kind load: ctr -n k8s.io images import - < docker-save archive.
  if in_node sh -c 'ctr -n k8s.io images import - < /test-images/busybox.docker.tar' >/dev/null &&
    in_node crictl images | grep -q 'bosun.test/busybox'; then
    pass "$D::ctr_import_stdin"
  else
    fail "$D::ctr_import_stdin" "image not listed by crictl: $(in_node crictl images 2>&1)"
  fi

  kubelet_checks "$D" "$t0"

  # A pod and a container through CRI, on the embedded network.
  to_node /tmp/pod.json <<J
{"metadata": {"name": "lane", "namespace": "default", "uid": "kind-lane-1"},
 "log_directory": "/var/log/pods/lane", "linux": {"cgroup_parent": "$parent"}}
J
  to_node /tmp/ctr.json <<'J'
{"metadata": {"name": "sleeper"}, "image": {"image": "bosun.test/busybox:latest"},
 "command": ["sleep", "4242"], "log_path": "sleeper.log", "linux": {}}
J
  local t_pod0
  t_pod0=$(now)
  pod=$(in_node crictl runp /tmp/pod.json 2>"$work/err") &&
    ctr=$(in_node crictl create "$pod" /tmp/ctr.json /tmp/pod.json 2>>"$work/err") &&
    in_node crictl start "$ctr" >/dev/null 2>>"$work/err"
  if [ -n "${ctr:-}" ] && until_ok 60 sh -c "podman exec $NODE crictl inspect $ctr | grep -q CONTAINER_RUNNING"; then
    log "$D: pod and container running in $(secs "$t_pod0" "$(now)") s"
    pass "$D::pod_runs"
  else
    fail "$D::pod_runs" "$(cat "$work/err")"
  fi
  ip=$(in_node crictl inspectp -o go-template --template '{{.status.network.ip}}' "${pod:-none}" 2>/dev/null)
  case "$ip" in 10.86.*) pass "$D::embedded_network_ip" ;; *) fail "$D::embedded_network_ip" "pod ip '$ip'" ;; esac

  # Its cgroup is under the node's tree on the guest (the node's own cgroup namespace inside):
  # a scope in the pod's slice (systemd) or a directory named by its id (cgroupfs).
  node_pid=$(podman inspect -f '{{.State.Pid}}' "$NODE")
  node_cg=$(sed -n 's/^0:://p' "/proc/$node_pid/cgroup")
  node_cg=${node_cg%/init.scope}
  sleeper=$(pgrep -f -x 'sleep 4242' | head -n1)
  sleeper_cg=$(sed -n 's/^0:://p' "/proc/${sleeper:-0}/cgroup" 2>/dev/null)
  log "$D: node cgroup $node_cg; container cgroup $sleeper_cg"
  if [ "$D" = cgroupfs ]; then want="$node_cg/kubepods/besteffort/${ctr:-none}"; else want="$node_cg/kubepods.slice/*bosun-*.scope"; fi
  # shellcheck disable=SC2254
  case "$sleeper_cg" in
    $want) pass "$D::cgroup_under_node" ;;
    *) fail "$D::cgroup_under_node" "container cgroup '$sleeper_cg' is not $want" ;;
  esac
  if in_node crictl stats -o json "${ctr:-none}" 2>/dev/null | grep -q '"workingSetBytes"'; then
    pass "$D::container_stats"
  else
    fail "$D::container_stats" "$(in_node crictl stats -o json "${ctr:-none}" 2>&1 | head -c 1000)"
  fi

  # systemctl restart bosun: the container keeps running (KillMode=process, re-adoption).
  if in_node systemctl restart bosun && in_node systemctl is-active bosun >/dev/null &&
    in_node crictl inspect "${ctr:-none}" 2>/dev/null | grep -q CONTAINER_RUNNING &&
    [ "$(pgrep -f -x 'sleep 4242' | head -n1)" = "$sleeper" ]; then
    pass "$D::restart_keeps_container"
  else
    fail "$D::restart_keeps_container" "$(in_node crictl ps -a 2>&1)"
  fi

  # A CNI conflist in /etc/cni/net.d (bosun re-reads the directory): the next pod is on it.
  write_conflist
  in_node sh -c "sed 's/kind-lane-1/kind-lane-2/; s/\"lane\"/\"lane-cni\"/' /tmp/pod.json > /tmp/pod2.json"
  pod2=$(in_node crictl runp /tmp/pod2.json 2>&1)
  ip2=$(in_node crictl inspectp -o go-template --template '{{.status.network.ip}}' "$pod2" 2>/dev/null)
  case "$ip2" in 10.99.0.*) pass "$D::cni_conflist_ip" ;; *) fail "$D::cni_conflist_ip" "pod ip '$ip2': $pod2" ;; esac
  in_node crictl rmp --all --force >/dev/null 2>&1
  in_node rm -f /etc/cni/net.d/10-lane.conflist

  case " $critest_drivers " in *" $D "*) node_critest "$D" ;; esac

  podman rm -f -v -t 10 "$NODE" >/dev/null || fail "$D::node_removed" "podman rm"
}

# A bridge + host-local conflist (Debian's containernetworking-plugins in the image).
write_conflist() {
  to_node /etc/cni/net.d/10-lane.conflist <<'J'
{"cniVersion": "1.0.0", "name": "lane", "plugins": [
  {"type": "bridge", "bridge": "lane0", "isGateway": true, "ipMasq": false,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.99.0.0/24"}]]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
J
}

for driver in $drivers; do
  case "$driver" in
    systemd | cgroupfs) node_test "$driver" ;;
    *) fail "node" "--drivers: unknown driver '$driver' (systemd, cgroupfs)" ;;
  esac
done
stop_registry

# The same node without a /var volume: /var/lib/bosun is on the node's overlayfs root, where
# overlayfs cannot put containers' writable layers. bosun refuses to start, saying what to mount.
if run_node >/dev/null &&
  until_ok 180 sh -c "podman exec $NODE journalctl -u bosun --no-pager | grep -q -e 'is on overlayfs' -e 'bosun serving'"; then
  journal=$(in_node journalctl -u bosun --no-pager 2>&1)
  if grep -q 'is on overlayfs' <<<"$journal" && grep -q -- '--volume /var' <<<"$journal" &&
    ! in_node systemctl is-active bosun >/dev/null; then
    pass overlay_root_refused
    grep -m1 'is on overlayfs' <<<"$journal" | sed 's/^/kind-lane: /' | cut -c1-400
  else
    fail overlay_root_refused "$(tail -n 5 <<<"$journal")"
  fi
else
  fail overlay_root_refused "no start or refusal of bosun in the node's journal"
fi

# Removing the node: nothing of it is left on the guest.
podman rm -f -v -t 10 "$NODE" >/dev/null || fail node_removed "podman rm"
podman volume prune -f >/dev/null 2>&1
sleep 1
snapshot "$work/after"
leaks=""
for kind in mounts cgroups links nft; do
  extra=$(comm -13 "$work/before.$kind" "$work/after.$kind")
  [ -z "$extra" ] || leaks="$leaks
$kind: $extra"
done
# One name per pgrep: a pattern of more than 15 characters matches no process name at all.
procs=$(for n in bosun ctr runc crun conmon kubelet catatonit critest; do pgrep -a -x "$n"; done
  pgrep -a -f 'sleep 42[0-9][0-9]|sleep 43[0-9][0-9]')
[ -z "$procs" ] || leaks="$leaks
processes: $procs"
if [ -z "$leaks" ]; then pass node_leaves_nothing; else fail node_leaves_nothing "$leaks"; fi
rm -rf "$work"
result
