#!/bin/sh
# critest (cri-tools v1.32, the CRI validation suite) against bosun in the VM lane's guest, once
# per cgroup driver (hack/vm/run.sh -- hack/vm/critest.sh), and one summary line per driver.
#
#   hack/vm/critest.sh [--drivers "cgroupfs systemd"] [--handler NAME] [CRITEST FLAG...]
#
# --handler NAME runs every pod on bosun's runtime handler NAME (critest's --runtime-handler,
# e.g. crun: docs/runtime-handlers.md); its lines say "critest crun driver D", counted the same.
#
# It starts Debian's docker-registry on the guest's 127.0.0.1:5000, pushes critest's images
# there (test-images/critest, `hack/testimages.py build-critest`; $BOSUN_CRITEST_IMAGES), and per
# driver starts the bosun built beside $BOSUN_IT with registry.k8s.io, gcr.io and docker.io
# mirrored to it, its own socket, root, state, network and cgroups, runs critest on its socket
# (every spec; critest itself skips the 5 benchmark specs), then removes the pods and stops it.
# A spec that fails is retried once (--ginkgo.flake-attempts 2): one that then passes is named
# as FLAKED with its first failure and the daemon's warnings, and counted in the summary line.
# critest: $BOSUN_CRITEST, else ../shared/bin/critest from the repository root, else PATH;
# without it or the images: `SKIP critest: <reason>`, counted as ignored.
#
# Known and expected: the digest spec pulls test-image-digest@sha256:9700f9a2..., upstream's
# bytes, which no offline build can reproduce. It fails, is named in the summary as known, and
# is counted as ignored in the `test result:` line; any other failed spec fails the run.
set -u

# One function, read whole before it runs: editing this file during a run cannot derail it.
main() {

drivers="cgroupfs systemd"
handler=
while [ $# -gt 0 ]; do
  case "$1" in
    --drivers) drivers="$2"; shift 2 ;;
    --handler) handler="$2"; shift 2 ;;
    *) break ;;
  esac
done
KNOWN_OFFLINE='public image with digest should be pulled and removed'
repo=$(pwd)
export PYTHONDONTWRITEBYTECODE=1

skip() {
  echo "SKIP critest: $1"
  echo "test result: ok. 0 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out (critest skipped)"
  exit 0
}
critest=${BOSUN_CRITEST:-$repo/../shared/bin/critest}
[ -x "$critest" ] || critest=$(command -v critest) ||
  skip "needs critest in ../shared/bin (from the repository root), \$BOSUN_CRITEST or PATH"
crictl=$(dirname "$critest")/crictl
[ -x "$crictl" ] || crictl=$(command -v crictl || true)
images=${BOSUN_CRITEST_IMAGES:-$repo/test-images/critest}
[ -f "$images/images.json" ] ||
  skip "needs critest's images in $images (hack/testimages.py build-critest, run by hack/setup.sh)"
bosun=$(dirname "${BOSUN_IT:-/nonexistent/x}")/../bosun
[ -x "$bosun" ] || skip "no bosun binary beside \$BOSUN_IT ($bosun): run through hack/vm/run.sh"

work=$(mktemp -d /var/tmp/bosun-critest.XXXXXX)
reg_pid=
daemon_pid=
cleanup() {
  [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null
  [ -n "$reg_pid" ] && kill "$reg_pid" 2>/dev/null
  wait 2>/dev/null
}
trap cleanup EXIT

# The registry: plain HTTP on the guest's loopback only, storage in the run's dir.
cat >"$work/registry.yml" <<EOF
version: 0.1
log:
  level: error
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $work/registry
http:
  addr: 127.0.0.1:5000
  secret: bosun-critest
EOF
setup_started=$(date +%s)
docker-registry serve "$work/registry.yml" >"$work/registry.log" 2>&1 &
reg_pid=$!
pushed=
for _ in $(seq 50); do
  if python3 hack/testimages.py push --by-ref --dir "$images" --registry 127.0.0.1:5000 \
    >"$work/push.log" 2>&1; then
    pushed=1
    break
  fi
  sleep 0.2
done
if [ -z "$pushed" ]; then
  echo "critest: pushing the images failed:"; tail -n 20 "$work/push.log" "$work/registry.log"
  echo "test result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out (critest setup)"
  exit 1
fi
echo "== critest: $(grep -c '^pushed ' "$work/push.log") image refs on 127.0.0.1:5000 ($(( $(date +%s) - setup_started )) s); $critest"
printf 'defaultTestContainerImage: registry.k8s.io/e2e-test-images/busybox:1.29-2\nwebServerTestImage: registry.k8s.io/e2e-test-images/nginx:1.14-2\n' \
  >"$work/test-images.yaml"

# critest's junit report: "P F S", then FAIL:/FLAKED: lines (hack/vm/junit_summary.py).
summarise() { python3 "$repo/hack/vm/junit_summary.py" "$1"; }

# With a handler: critest's --runtime-handler, and "crun " in every line naming the run.
handler_flag=
label=
if [ -n "$handler" ]; then handler_flag="--runtime-handler=$handler"; label="$handler "; fi

status=0
summary=""
for driver in $drivers; do
  dir="$work/$driver"
  sock="$dir/bosun.sock"
  mkdir -p "$dir/cni" "$dir/report"
  if [ "$driver" = systemd ]; then parent=bosuncritest.slice; else parent=/bosuncritest; fi
  cat >"$dir/config.toml" <<EOF
socket = "$sock"
root = "$dir/root"
state = "/run/bosun-critest-$handler$driver"
cgroup_driver = "$driver"
default_cgroup_parent = "$parent"

[network]
conf_dir = "$dir/cni"
data_dir = "$dir/leases"

[pod]
log_dir = "$dir/pods"

[node]
cgroup_root = "/bosuncritest"

[registry.hosts."registry.k8s.io"]
mirrors = ["http://127.0.0.1:5000"]

[registry.hosts."gcr.io"]
mirrors = ["http://127.0.0.1:5000"]

[registry.hosts."docker.io"]
mirrors = ["http://127.0.0.1:5000"]

[registry.hosts."127.0.0.1:5000"]
plain_http = true
EOF
  echo "== critest ${label}driver $driver"
  "$bosun" daemon --config "$dir/config.toml" >"$dir/daemon.log" 2>&1 &
  daemon_pid=$!
  for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.2; done
  started=$(date +%s)
  "$critest" --runtime-endpoint "unix://$sock" --image-endpoint "unix://$sock" \
    --test-images-file "$work/test-images.yaml" --report-dir "$dir/report" \
    --ginkgo.junit-report "$dir/report/junit.xml" --ginkgo.no-color --ginkgo.flake-attempts 2 ${handler_flag:+"$handler_flag"} "$@" \
    >"$dir/critest.log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - started ))
  out=$(summarise "$dir/report/junit.xml")
  counts=$(echo "$out" | head -n1)
  passed=${counts%% *} skipped=${counts##* } failed=${counts#* }
  failed=${failed%% *}
  fails=$(echo "$out" | sed -n 's/^FAIL: //p')
  known=$(echo "$fails" | grep -c -F "$KNOWN_OFFLINE")
  other=$(echo "$fails" | grep -v -F "$KNOWN_OFFLINE" | grep -c .)
  flaked=$(echo "$out" | sed -n 's/^FLAKED: //p')
  retried=$(echo "$flaked" | grep -c .)
  line="critest ${label}driver $driver: $passed passed ($retried on a retry), $failed failed, $skipped skipped ($secs s)"
  echo "$line"
  # With a handler, every pod critest made must have been on it (the daemon logs each
  # sandbox's handler): a run that fell back to runc would prove nothing.
  off=0
  if [ -n "$handler" ]; then
    ready=$(grep -c 'sandbox ready' "$dir/daemon.log")
    on=$(grep 'sandbox ready' "$dir/daemon.log" | grep -c -E "handler=$handler( |\$)")
    off=$((ready - on))
    echo "  pods on $handler: $on of $ready"
    [ "$on" -gt 0 ] && [ "$off" -eq 0 ] || off=$((off + 1))
  fi
  if [ "$retried" -gt 0 ]; then
    echo "$flaked" | sed 's/^/  FLAKED (failed once, passed on the retry): /'
    echo "  the daemon's warnings and errors:"
    grep -E ' (WARN|ERROR) ' "$dir/daemon.log" | tail -n 12 | sed 's/^/    /'
  fi
  echo "$fails" | grep . | while read -r name; do
    case "$name" in
      *"$KNOWN_OFFLINE"*) echo "  failed (known: upstream's pinned digest, offline): $name" ;;
      *) echo "  FAILED: $name" ;;
    esac
  done
  # Failures for the closing count: critest's own (the known digest spec aside), plus one for
  # pods off the handler and one for a critest that failed without a failed spec, so that a
  # FAILED run never says "0 failed".
  counted=$((failed - known))
  [ "$off" -eq 0 ] || counted=$((counted + 1))
  { [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; } && counted=$((counted + 1))
  if [ "$other" -gt 0 ] || [ "$off" -gt 0 ] || { [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; }; then
    status=1
    echo "  critest exit $rc; its log's last lines:"
    tail -n 30 "$dir/critest.log" | sed 's/^/    /'
    echo "  the daemon's last lines:"
    tail -n 8 "$dir/daemon.log" | sed 's/^/    /'
    result=FAILED
  else
    result=ok
  fi
  summary="$summary$line
"
  # libtest's format, for hack/test.sh's closing line; the known digest spec counts as ignored.
  echo "test result: $result. $passed passed; $counted failed; $((skipped + known)) ignored; 0 measured; 0 filtered out (critest ${label}driver $driver)"

  # Clean up: every pod critest left, then the daemon; then say what remains.
  if [ -n "$crictl" ]; then
    "$crictl" --runtime-endpoint "unix://$sock" rmp --all --force >/dev/null 2>&1
  fi
  kill "$daemon_pid" 2>/dev/null
  wait "$daemon_pid" 2>/dev/null
  daemon_pid=
  left=$(
    {
      find /sys/fs/cgroup -path '*bosuncritest*' -name cgroup.procs -exec grep -l . {} + 2>/dev/null
      grep " $dir/" /proc/mounts
      ps -eo pid=,args= | grep -F "$dir/" | grep -v -E 'grep|ps -eo'
    } | sed 's/^/    /'
  )
  if [ -n "$left" ]; then
    echo "  critest ${label}driver $driver left behind:"; echo "$left"
    summary="${summary}critest ${label}driver $driver: left pods behind (see above)
"
  fi
done
echo "== critest summary"
printf '%s' "$summary"
exit "$status"
}

main "$@"
