#!/usr/bin/env bash
# The kind-node test of the VM lane (issue 27): runs in the guest (cgroup v2, systemd), where
# Debian's podman runs the node image of hack/kind/build.sh the way kind's podman provider runs
# a node, then checks bosun inside it and that removing the node leaves the guest as found.
#
#   hack/vm/run.sh --no-tests --share /var/cache/bosun-kind --share /work/shared/bin -- \
#     hack/kind/lane-test.sh /var/cache/bosun-kind/node-<key>.tar [SHARED_BIN]
#
# SHARED_BIN (default ../shared/bin of the repository) holds crictl and the kubelet: they are
# mounted into the node (kindest/node ships its own). Without crictl the test says SKIP. Prints
# `test result:` lines as the cargo harness does, and the measured times.
set -uo pipefail

IMAGE="${1:?usage: lane-test.sh NODE_IMAGE_TAR [SHARED_BIN]}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SHARED="$(readlink -f "${2:-$REPO/../shared/bin}")"
SCALE="${BOSUN_TEST_TIME_SCALE:-1}"
NODE=bosun-node
passed=0 failed=0 skipped=0

log() { echo "kind-lane: $*"; }
pass() { log "ok $1"; passed=$((passed + 1)); }
fail() { log "FAILED $1: $2"; failed=$((failed + 1)); }
skip() { echo "SKIP kind::$1: $2"; skipped=$((skipped + 1)); }
result() {
  local s=ok
  [ "$failed" -eq 0 ] || s=FAILED
  echo "test result: $s. $passed passed; $failed failed; $skipped ignored; 0 measured; 0 filtered out (kind lane)"
  [ "$failed" -eq 0 ]
}
in_node() { podman exec "$NODE" "$@"; }
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

log "loading $IMAGE"
podman load -q -i "$IMAGE" || { fail load "podman load"; result; exit 1; }

# kind's podman provider: privileged, its own cgroup namespace, /tmp and /run on tmpfs, /var on
# a volume, the host's modules read-only; systemd as PID 1 (the image's /sbin/init).
run_node() {
  podman run -d --name "$NODE" --hostname "$NODE" \
    --privileged --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
    --cgroupns=private --tmpfs /tmp --tmpfs /run "$@" \
    --volume /lib/modules:/lib/modules:ro \
    --volume "$SHARED/crictl:/usr/local/bin/crictl:ro" \
    --volume "$SHARED:/opt/shared-bin:ro" \
    --volume "$(readlink -f "$REPO/test-images"):/test-images:ro" \
    localhost/bosun-node:dev
}
t0=$(now)
run_node --volume /var || { fail node "podman run"; result; exit 1; }
if until_ok 300 sh -c "podman exec $NODE systemctl is-active bosun | grep -qx active"; then
  t_bosun=$(now)
  pass unit_active
else
  fail unit_active "bosun did not become active: $(in_node systemctl status bosun --no-pager 2>&1 | tail -n 20)"
fi
log "node boot to bosun active (Type=notify, READY=1): $(secs "$t0" "${t_bosun:-$(now)}") s"
in_node systemctl is-system-running 2>&1 | sed 's/^/kind-lane: node systemd: /'

# crictl on containerd's socket path (extra_sockets) and bosun's own.
if in_node crictl --runtime-endpoint unix:///run/containerd/containerd.sock info >"$work/info" 2>&1 &&
  grep -q '"type": "RuntimeReady"' "$work/info" &&
  python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["status"]["conditions"]; sys.exit(not all(x["status"] for x in c))' "$work/info"; then
  pass crictl_info
else
  fail crictl_info "$(head -c 2000 "$work/info")"
fi

# kind load: ctr -n k8s.io images import - < docker-save archive.
if in_node sh -c 'ctr -n k8s.io images import - < /test-images/busybox.docker.tar' &&
  in_node crictl images | grep -q 'bosun.test/busybox'; then
  pass ctr_import_stdin
else
  fail ctr_import_stdin "image not listed by crictl: $(in_node crictl images 2>&1)"
fi

# A real kubelet in the node (standalone: static pods), as kind's unit runs it: systemd cgroup
# driver, --runtime-cgroups, containerd's socket path. Its pod has probes, logs and a preStop.
kubelet_started=
if [ ! -x "$SHARED/kubelet" ]; then
  skip kubelet "no kubelet in $SHARED (see /work/shared/bin/README.md)"
else
  in_node mkdir -p /etc/kubernetes/manifests /var/lib/kind-lane
  podman exec -i "$NODE" sh -c 'cat > /var/lib/kubelet-config.yaml' <<'Y'
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: /etc/kubernetes/manifests
address: 127.0.0.1
readOnlyPort: 10255
healthzBindAddress: 127.0.0.1
cgroupDriver: systemd
failSwapOn: false
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
Y
  podman exec -i "$NODE" sh -c 'cat > /etc/kubernetes/manifests/web.yaml' <<'Y'
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default}
spec:
  terminationGracePeriodSeconds: 10
  volumes: [{name: out, hostPath: {path: /var/lib/kind-lane}}]
  containers:
  - name: web
    image: bosun.test/busybox:latest
    imagePullPolicy: Never
    command: ["sh", "-c", "echo hello-from-kind-node; touch /tmp/ready; while true; do sleep 1; done"]
    volumeMounts: [{name: out, mountPath: /out}]
    readinessProbe: {exec: {command: ["cat", "/tmp/ready"]}, periodSeconds: 2}
    livenessProbe: {exec: {command: ["true"]}, periodSeconds: 5}
    lifecycle: {preStop: {exec: {command: ["sh", "-c", "echo prestop-ran > /out/prestop"]}}}
Y
  t_kubelet=$(now)
  in_node systemd-run --unit kubelet --property Delegate=yes \
    /opt/shared-bin/kubelet --config /var/lib/kubelet-config.yaml --root-dir /var/lib/kubelet \
    --runtime-cgroups=/system.slice/bosun.service --hostname-override bosun-node -v 1 >/dev/null &&
    kubelet_started=1
  pod_ready() {
    in_node curl -sf http://127.0.0.1:10255/pods | python3 -c '
import json, sys
for p in json.load(sys.stdin)["items"]:
    if p["metadata"]["name"].startswith("web-"):
        c = {x["type"]: x["status"] for x in p.get("status", {}).get("conditions", [])}
        sys.exit(0 if c.get("Ready") == "True" else 1)
sys.exit(1)'
  }
  if [ -n "$kubelet_started" ] && until_ok 120 pod_ready; then
    t_ready=$(now)
    log "kubelet start to pod Ready: $(secs "$t_kubelet" "$t_ready") s; node boot to pod Ready: $(secs "$t0" "$t_ready") s"
    pass kubelet_pod_ready
  else
    fail kubelet_pod_ready "$(in_node journalctl -u kubelet --no-pager 2>&1 | grep -iE 'error|fail' | tail -n 15)"
  fi
  web=$(in_node crictl ps -q --name '^web$' 2>/dev/null | head -n1)
  if [ -n "$web" ] && in_node crictl logs "$web" 2>&1 | grep -q hello-from-kind-node; then
    pass kubelet_pod_logs
  else
    fail kubelet_pod_logs "container '$web': $(in_node crictl logs "${web:-none}" 2>&1 | tail -n 3)"
  fi
  if until_ok 60 sh -c "podman exec $NODE curl -sf http://127.0.0.1:10255/stats/summary | grep -q web-bosun-node"; then
    pass kubelet_stats_summary
  else
    fail kubelet_stats_summary "$(in_node curl -s http://127.0.0.1:10255/stats/summary 2>&1 | head -c 600)"
  fi
  # systemctl restart bosun: the kubelet's pod stays Ready, its container the same.
  in_node systemctl restart bosun
  if [ -n "${web:-}" ] && until_ok 60 pod_ready &&
    in_node crictl inspect "$web" 2>/dev/null | grep -q CONTAINER_RUNNING; then
    pass restart_keeps_kubelet_pod
  else
    fail restart_keeps_kubelet_pod "$(in_node crictl ps -a 2>&1)"
  fi
  # The static pod removed: the kubelet runs its preStop hook, then stops it.
  in_node rm -f /etc/kubernetes/manifests/web.yaml
  if until_ok 45 podman exec "$NODE" grep -q prestop-ran /var/lib/kind-lane/prestop; then
    pass kubelet_prestop_hook
  else
    fail kubelet_prestop_hook "no /var/lib/kind-lane/prestop: $(in_node crictl ps -a 2>&1)"
  fi
  # The kubelet would take the crictl pods below for orphans of its own and remove them.
  in_node systemctl stop kubelet
fi

# A pod and a container through CRI, on the embedded network.
podman exec -i "$NODE" sh -c 'cat > /tmp/pod.json' <<'J'
{"metadata": {"name": "lane", "namespace": "default", "uid": "kind-lane-1"},
 "log_directory": "/var/log/pods/lane", "linux": {"cgroup_parent": "kubepods-besteffort.slice"}}
J
podman exec -i "$NODE" sh -c 'cat > /tmp/ctr.json' <<'J'
{"metadata": {"name": "sleeper"}, "image": {"image": "bosun.test/busybox:latest"},
 "command": ["sleep", "4242"], "log_path": "sleeper.log", "linux": {}}
J
t_pod0=$(now)
pod=$(in_node crictl runp /tmp/pod.json 2>"$work/err") &&
  ctr=$(in_node crictl create "$pod" /tmp/ctr.json /tmp/pod.json 2>>"$work/err") &&
  in_node crictl start "$ctr" >/dev/null 2>>"$work/err"
if [ -n "${ctr:-}" ] && until_ok 60 sh -c "podman exec $NODE crictl inspect $ctr | grep -q CONTAINER_RUNNING"; then
  log "pod and container running in $(secs "$t_pod0" "$(now)") s"
  pass pod_runs
else
  fail pod_runs "$(cat "$work/err")"
fi
ip=$(in_node crictl inspectp -o go-template --template '{{.status.network.ip}}' "${pod:-none}" 2>/dev/null)
case "$ip" in 10.86.*) pass embedded_network_ip ;; *) fail embedded_network_ip "pod ip '$ip'" ;; esac

# Its cgroup is under the node's tree on the guest (the node's own cgroup namespace inside).
node_pid=$(podman inspect -f '{{.State.Pid}}' "$NODE")
node_cg=$(sed -n 's/^0:://p' "/proc/$node_pid/cgroup")
node_cg=${node_cg%/init.scope}
sleeper=$(pgrep -f -x 'sleep 4242' | head -n1)
sleeper_cg=$(sed -n 's/^0:://p' "/proc/${sleeper:-0}/cgroup" 2>/dev/null)
log "node cgroup $node_cg; container cgroup $sleeper_cg"
case "$sleeper_cg" in
  "$node_cg"/kubepods.slice/*bosun-*.scope) pass cgroup_under_node ;;
  *) fail cgroup_under_node "container cgroup '$sleeper_cg' not under '$node_cg/kubepods.slice'" ;;
esac
if in_node crictl stats -o json "${ctr:-none}" 2>/dev/null | grep -q '"workingSetBytes"'; then
  pass container_stats
else
  fail container_stats "$(in_node crictl stats -o json "${ctr:-none}" 2>&1 | head -c 1000)"
fi

# systemctl restart bosun: the container keeps running (KillMode=process, re-adoption).
if in_node systemctl restart bosun && in_node systemctl is-active bosun >/dev/null &&
  in_node crictl inspect "${ctr:-none}" 2>/dev/null | grep -q CONTAINER_RUNNING &&
  [ "$(pgrep -f -x 'sleep 4242' | head -n1)" = "$sleeper" ]; then
  pass restart_keeps_container
else
  fail restart_keeps_container "$(in_node crictl ps -a 2>&1)"
fi

# A CNI conflist in /etc/cni/net.d (bosun re-reads the directory): the next pod is on it.
podman exec -i "$NODE" sh -c 'cat > /etc/cni/net.d/10-lane.conflist' <<'J'
{"cniVersion": "1.0.0", "name": "lane", "plugins": [
  {"type": "bridge", "bridge": "lane0", "isGateway": true, "ipMasq": false,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.99.0.0/24"}]]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
J
in_node sh -c "sed 's/kind-lane-1/kind-lane-2/; s/\"lane\"/\"lane-cni\"/' /tmp/pod.json > /tmp/pod2.json"
pod2=$(in_node crictl runp /tmp/pod2.json 2>&1)
ip2=$(in_node crictl inspectp -o go-template --template '{{.status.network.ip}}' "$pod2" 2>/dev/null)
case "$ip2" in 10.99.0.*) pass cni_conflist_ip ;; *) fail cni_conflist_ip "pod ip '$ip2': $pod2" ;; esac

podman rm -f -v -t 10 "$NODE" >/dev/null || fail node_removed "podman rm"

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
procs=$(for n in bosun ctr runc crun conmon kubelet catatonit; do pgrep -a -x "$n"; done
  pgrep -a -f 'sleep 4242')
[ -z "$procs" ] || leaks="$leaks
processes: $procs"
if [ -z "$leaks" ]; then pass node_leaves_nothing; else fail node_leaves_nothing "$leaks"; fi
rm -rf "$work"
result
