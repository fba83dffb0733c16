# shellcheck shell=bash
# critest inside the kind node (sourced by hack/kind/lane-test.sh), on the node's bosun over
# containerd's socket path, as hack/vm/critest.sh runs it on the guest. critest's images
# (test-images/critest, `hack/testimages.py build-critest`) are served by Debian's
# docker-registry on the guest's address on podman's bridge (the node's 127.0.0.1 is its own;
# the guest has no route off the machine), and the node reaches them the way kind's
# local-registry recipe says: /etc/containerd/certs.d/<host>/hosts.toml, which bosun reads.

KNOWN_OFFLINE='public image with digest should be pulled and removed'
reg_pid=

stop_registry() {
  [ -z "$reg_pid" ] || { kill "$reg_pid" 2>/dev/null; wait "$reg_pid" 2>/dev/null; }
  reg_pid=
}

# start_registry ADDR: the registry on ADDR:5000 with critest's images pushed (once per run).
start_registry() {
  local addr=$1 images=$2 t
  [ -z "$reg_pid" ] || return 0
  t=$(now)
  cat >"$work/registry.yml" <<Y
version: 0.1
log: {level: error, accesslog: {disabled: true}}
storage: {filesystem: {rootdirectory: $work/registry}}
http: {addr: "$addr:5000", secret: bosun-kind-critest}
Y
  docker-registry serve "$work/registry.yml" >"$work/registry.log" 2>&1 &
  reg_pid=$!
  for _ in $(seq 50); do
    if python3 "$REPO/hack/testimages.py" push --by-ref --dir "$images" --registry "$addr:5000" \
      >"$work/push.log" 2>&1; then
      log "critest: $(grep -c '^pushed ' "$work/push.log") image refs on $addr:5000 ($(secs "$t" "$(now)") s)"
      return 0
    fi
    sleep 0.2
  done
  log "critest: pushing the images to $addr:5000 failed: $(tail -n 5 "$work/push.log" "$work/registry.log")"
  stop_registry
  return 1
}

node_critest() {
  local D=$1 images="$REPO/test-images/critest" gw host server t rc out counts p f s fails known other
  if [ -z "$CRITEST" ]; then
    skip "$D::critest" "no critest (\$BOSUN_CRITEST, $SHARED/critest; see /work/shared/bin/README.md)"
    return
  fi
  if [ ! -f "$images/images.json" ]; then
    skip "$D::critest" "no critest images in $images (hack/testimages.py build-critest)"
    return
  fi
  # The guest's address on podman's bridge: the node's default gateway.
  gw=$(in_node ip -4 route show default | awk '{ print $3; exit }')
  if [ -z "$gw" ] || ! ip -4 -o addr show | grep -q " inet $gw/"; then
    fail "$D::critest" "the node's gateway '$gw' is not an address of the guest"
    critest_failed=1
    return
  fi
  start_registry "$gw" "$images" || { fail "$D::critest" "registry setup"; critest_failed=1; return; }
  for host in registry.k8s.io gcr.io docker.io; do
    server="https://$host"
    [ "$host" != docker.io ] || server=https://registry-1.docker.io
    to_node "/etc/containerd/certs.d/$host/hosts.toml" <<T
server = "$server"

[host."http://$gw:5000"]
  capabilities = ["pull", "resolve"]
T
  done
  printf 'defaultTestContainerImage: registry.k8s.io/e2e-test-images/busybox:1.29-2\nwebServerTestImage: registry.k8s.io/e2e-test-images/nginx:1.14-2\n' |
    to_node /tmp/critest/test-images.yaml
  # critest runs its 9 AppArmor specs when the kernel has AppArmor (the guest's has), and their
  # setup loads its test profiles with `sudo apparmor_parser`, which this node image (like
  # kindest/node) has not got: without them they fail in critest's BeforeEach, never reaching
  # bosun (the lane's first run: 9 such failures). Skipped then, and said.
  local skips=()
  if ! in_node sh -c 'command -v apparmor_parser && command -v sudo' >/dev/null 2>&1; then
    echo "SKIP kind::$D::critest AppArmor specs: their setup runs 'sudo apparmor_parser', not in the node image"
    skips=(--ginkgo.skip AppArmor)
  fi
  log "critest in the node (driver $D): /opt/critest-bin/$(basename "$CRITEST") on $SOCK"
  t=$(now)
  in_node "/opt/critest-bin/$(basename "$CRITEST")" --runtime-endpoint "$SOCK" --image-endpoint "$SOCK" \
    --test-images-file /tmp/critest/test-images.yaml --report-dir /tmp/critest \
    --ginkgo.junit-report /tmp/critest/junit.xml --ginkgo.no-color --ginkgo.flake-attempts 2 \
    "${skips[@]}" >"$work/critest-$D.log" 2>&1
  rc=$?
  in_node cat /tmp/critest/junit.xml >"$work/junit-$D.xml" 2>/dev/null
  out=$(python3 "$REPO/hack/vm/junit_summary.py" "$work/junit-$D.xml")
  counts=$(head -n1 <<<"$out")
  read -r p f s <<<"$counts"
  fails=$(sed -n 's/^FAIL: //p' <<<"$out")
  known=$(grep -c -F "$KNOWN_OFFLINE" <<<"$fails")
  other=$(grep -v -F "$KNOWN_OFFLINE" <<<"$fails" | grep -c .)
  log "critest in the node (driver $D): $p passed, $f failed, $s skipped ($(secs "$t" "$(now)") s)"
  sed -n 's/^FLAKED: /  FLAKED (failed once, passed on the retry): /p' <<<"$out"
  grep . <<<"$fails" | while read -r name; do
    case "$name" in
      *"$KNOWN_OFFLINE"*) echo "  failed (known: upstream's pinned digest, offline): $name" ;;
      *) echo "  FAILED: $name" ;;
    esac
  done
  local res=ok
  if [ "$other" -gt 0 ] || { [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; }; then
    res=FAILED
    critest_failed=1
    echo "  critest exit $rc; its log's last lines:"
    tail -n 30 "$work/critest-$D.log" | sed 's/^/    /'
    echo "  bosun's last lines:"
    in_node journalctl -u bosun --no-pager -n 8 2>&1 | sed 's/^/    /'
  fi
  echo "test result: $res. $p passed; $((f - known)) failed; $((s + known)) ignored; 0 measured; 0 filtered out (critest in the kind node, driver $D)"
  in_node crictl rmp --all --force >/dev/null 2>&1
}
