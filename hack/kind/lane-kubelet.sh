# shellcheck shell=bash
# The real kubelet in the kind node (sourced by hack/kind/lane-test.sh): standalone, static
# pods, as kind's unit runs it (--runtime-cgroups, containerd's socket path), on the node's
# cgroup driver. Its pods: `web` (probes, logs, a preStop hook, the embedded network, in
# /stats/summary with cpu and memory, Ready across `systemctl restart bosun`), `cni` (on a
# conflist dropped in /etc/cni/net.d), `oom` (over its memory limit: OOMKilled) and `escape`
# (hostPID, a child left behind its container's init: the pod's removal kills it too).

# kubelet_pod_json NAME PYTHON_EXPR: exits 0 when the kubelet's /pods has the static pod
# NAME-bosun-node and EXPR (over `p`, the pod object) is true.
kubelet_pod() {
  in_node curl -sf http://127.0.0.1:10255/pods | python3 -c '
import json, sys
for p in json.load(sys.stdin)["items"]:
    if p["metadata"]["name"] == sys.argv[1] + "-bosun-node":
        sys.exit(0 if eval(sys.argv[2]) else 1)
sys.exit(1)' "$1" "$2"
}
pod_ready() {
  kubelet_pod web '{c["type"]: c["status"] for c in p.get("status", {}).get("conditions", [])}.get("Ready") == "True"'
}
pod_ip() {
  in_node curl -sf http://127.0.0.1:10255/pods | python3 -c '
import json, sys
for p in json.load(sys.stdin)["items"]:
    if p["metadata"]["name"] == sys.argv[1] + "-bosun-node":
        print(p.get("status", {}).get("podIP", ""))' "$1"
}
# The pod in /stats/summary with cpu and memory, the pod's own and its container's.
stats_listed() {
  in_node curl -sf http://127.0.0.1:10255/stats/summary | python3 -c '
import json, sys
for p in json.load(sys.stdin).get("pods", []):
    if p["podRef"]["name"] == "web-bosun-node":
        has = lambda o: o.get("cpu", {}).get("usageCoreNanoSeconds", 0) > 0 and o.get("memory", {}).get("workingSetBytes", 0) > 0
        c = [x for x in p.get("containers", []) if x["name"] == "web"]
        sys.exit(0 if has(p) and c and has(c[0]) else 1)
sys.exit(1)'
}
manifest() { to_node "/etc/kubernetes/manifests/$1.yaml"; }

kubelet_checks() {
  local D=$1 t0=$2 t_kubelet t_ready web ip oom escapee escape_cg
  if [ ! -x "$SHARED/kubelet" ]; then
    skip "$D::kubelet" "no kubelet in $SHARED (see /work/shared/bin/README.md)"
    return
  fi
  to_node /var/lib/kubelet-config.yaml <<Y
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: /etc/kubernetes/manifests
address: 127.0.0.1
readOnlyPort: 10255
healthzBindAddress: 127.0.0.1
cgroupDriver: $D
failSwapOn: false
containerRuntimeEndpoint: $SOCK
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
Y
  in_node mkdir -p /var/lib/kind-lane
  manifest web <<'Y'
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
    readinessProbe: {exec: {command: ["cat", "/tmp/ready"]}, periodSeconds: 2, timeoutSeconds: 20}
    livenessProbe: {exec: {command: ["true"]}, periodSeconds: 5, timeoutSeconds: 20, failureThreshold: 12}
    lifecycle: {preStop: {exec: {command: ["sh", "-c", "echo prestop-ran > /out/prestop"]}}}
Y
  t_kubelet=$(now)
  if ! in_node systemd-run --unit kubelet --property Delegate=yes \
    /opt/shared-bin/kubelet --config /var/lib/kubelet-config.yaml --root-dir /var/lib/kubelet \
    --runtime-cgroups=/system.slice/bosun.service --hostname-override bosun-node -v 1 >/dev/null; then
    fail "$D::kubelet_pod_ready" "systemd-run of the kubelet failed"
    return
  fi
  # An exec probe is a runc exec: ~1 s under TCG, more on a loaded machine, and none answers
  # while bosun restarts (below); the default 1 s timeout and 3 failures restarted the container.
  if until_ok 120 pod_ready; then
    t_ready=$(now)
    log "$D: kubelet start to pod Ready: $(secs "$t_kubelet" "$t_ready") s; node boot to pod Ready: $(secs "$t0" "$t_ready") s"
    pass "$D::kubelet_pod_ready"
  else
    fail "$D::kubelet_pod_ready" "$(in_node journalctl -u kubelet --no-pager 2>&1 | grep -iE 'error|fail' | tail -n 15)"
  fi
  ip=$(pod_ip web)
  case "$ip" in 10.86.*) pass "$D::kubelet_pod_embedded_ip" ;; *) fail "$D::kubelet_pod_embedded_ip" "web's podIP '$ip'" ;; esac
  web=$(in_node crictl ps -q --name '^web$' 2>/dev/null | head -n1)
  if [ -n "$web" ] && in_node crictl logs "$web" 2>&1 | grep -q hello-from-kind-node; then
    pass "$D::kubelet_pod_logs"
  else
    fail "$D::kubelet_pod_logs" "container '$web': $(in_node crictl logs "${web:-none}" 2>&1 | tail -n 3)"
  fi
  if until_ok 90 stats_listed; then
    pass "$D::kubelet_stats_summary"
  else
    fail "$D::kubelet_stats_summary" "web-bosun-node without cpu and memory: $(in_node curl -s http://127.0.0.1:10255/stats/summary 2>&1 |
      python3 -c 'import json,sys; print([p for p in json.load(sys.stdin).get("pods", []) if p["podRef"]["name"] == "web-bosun-node"])' 2>&1 | head -c 1500)"
  fi
  # systemctl restart bosun: the kubelet's pod stays Ready, its container the same.
  in_node systemctl restart bosun
  if [ -n "${web:-}" ] && until_ok 60 pod_ready &&
    in_node crictl inspect "$web" 2>/dev/null | grep -q CONTAINER_RUNNING; then
    pass "$D::restart_keeps_kubelet_pod"
  else
    fail "$D::restart_keeps_kubelet_pod" "$(in_node crictl ps -a 2>&1)
$(in_node journalctl -u kubelet --no-pager 2>&1 | grep -i -E 'probe|killing' | tail -n 6)"
  fi

  # Three more pods at once: on a CNI conflist, over its memory limit, and one whose container
  # leaves a child behind its init in the node's PID namespace (only the cgroup holds it).
  write_conflist
  manifest cni <<'Y'
apiVersion: v1
kind: Pod
metadata: {name: cni, namespace: default}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - {name: cni, image: "bosun.test/busybox:latest", imagePullPolicy: Never, command: ["sleep", "4300"]}
Y
  manifest oom <<'Y'
apiVersion: v1
kind: Pod
metadata: {name: oom, namespace: default}
spec:
  restartPolicy: Never
  containers:
  - name: oom
    image: bosun.test/busybox:latest
    imagePullPolicy: Never
    command: ["sh", "-c", "x=a; while true; do x=$x$x; done"]
    resources: {limits: {memory: 16Mi}}
Y
  manifest escape <<'Y'
apiVersion: v1
kind: Pod
metadata: {name: escape, namespace: default}
spec:
  hostPID: true
  terminationGracePeriodSeconds: 2
  containers:
  - name: escape
    image: bosun.test/busybox:latest
    imagePullPolicy: Never
    command: ["sh", "-c", "(sleep 4343 &); exec sleep 4344"]
Y
  if until_ok 90 kubelet_pod cni 'p.get("status", {}).get("podIP", "").startswith("10.99.0.")'; then
    pass "$D::kubelet_pod_on_cni_conflist"
  else
    fail "$D::kubelet_pod_on_cni_conflist" "cni's podIP '$(pod_ip cni)'"
  fi
  oom_reason() {
    local id
    id=$(in_node crictl ps -a -q --name '^oom$' | head -n1)
    [ -n "$id" ] && in_node crictl inspect "$id" | grep -q '"reason": "OOMKilled"'
  }
  if until_ok 90 oom_reason; then
    oom=$(in_node crictl ps -a -q --name '^oom$' | head -n1)
    log "$D: oom: $(in_node crictl inspect -o go-template --template '{{.status.reason}} exit {{.status.exitCode}}' "$oom" 2>&1)"
    pass "$D::kubelet_pod_oom_killed"
  else
    oom=$(in_node crictl ps -a -q --name '^oom$' | head -n1)
    fail "$D::kubelet_pod_oom_killed" "container '$oom': $(in_node crictl inspect "${oom:-none}" 2>&1 | grep -E '"(state|reason|exitCode)"')"
  fi
  if until_ok 60 pgrep -f -x 'sleep 4343'; then
    escapee=$(pgrep -f -x 'sleep 4343' | head -n1)
    escape_cg=$(sed -n 's/^0:://p' "/proc/$escapee/cgroup" 2>/dev/null)
    log "$D: escape's child $escapee in $escape_cg"
  fi

  # The static pods removed: the kubelet runs web's preStop hook, then stops them all.
  in_node sh -c 'rm -f /etc/kubernetes/manifests/*.yaml'
  if until_ok 45 podman exec "$NODE" grep -q prestop-ran /var/lib/kind-lane/prestop; then
    pass "$D::kubelet_prestop_hook"
  else
    fail "$D::kubelet_prestop_hook" "no /var/lib/kind-lane/prestop: $(in_node crictl ps -a 2>&1)"
  fi
  if [ -z "${escapee:-}" ]; then
    fail "$D::pod_removal_kills_all" "escape's child (sleep 4343) never ran: $(in_node crictl ps -a 2>&1)"
  elif until_ok 60 sh -c "! pgrep -f -x 'sleep 434[34]' && [ ! -d '/sys/fs/cgroup$escape_cg' ]"; then
    pass "$D::pod_removal_kills_all"
  else
    fail "$D::pod_removal_kills_all" "left: $(pgrep -a -f 'sleep 434[34]'); cgroup $escape_cg: $(cat "/sys/fs/cgroup$escape_cg/cgroup.procs" 2>&1)"
  fi
  # The kubelet would take the crictl pods that follow for orphans of its own and remove them.
  in_node systemctl stop kubelet
  in_node rm -f /etc/cni/net.d/10-lane.conflist
}
