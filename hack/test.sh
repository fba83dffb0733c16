#!/usr/bin/env bash
# The project's one test command: formatting, lints, unit tests and the integration tests
# (the real daemon over its socket, a real registry on 127.0.0.1). Integration tests need root
# and the packages/images from hack/setup.sh; where those are missing they are reported as
# ignored with the reason, never as passed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The VM lane's focused subset: one integration run per filter, for each cgroup driver.
VM_SUBSET=(
  systemd::
  cgroups::
  cri::containers::exit_codes_and_reasons
  cri::containers::update_container_resources
  cri::stats::container_and_pod_stats
  cri::pods::lifecycle_pod_files
  cri::network::pods_get_ips
  cri::recovery::kill9_and_restart
  cri::handlers::
  pod::termination::daemon_kill9_mid_life
  pod::node::qos
  faults::run_pod_sandbox_fails_cleanly_at_every_step
  faults::create_container_fails_cleanly_at_every_step
  faults::a_daemon_
  cri::apparmor::
  cri::checkpoint::
)

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --all-targets --locked -- -D warnings
echo "== cargo test"
mkdir -p target
set +e
cargo test --locked -- --test-threads "${BOSUN_TEST_THREADS:-2}" 2>&1 | tee target/test.log
status=${PIPESTATUS[0]}
# The VM lane (cgroup v2, systemd as PID 1) with both cgroup drivers: the systemd unit (start,
# restart, crash: containers re-adopted), cgroup placement and cgroup.kill, v2 stats, OOM and
# live resource updates, a pod lifecycle with networking, kill -9 recovery with the leak check,
# supervised pods and their QoS cgroups (kubepods, burstable, besteffort: directories or
# slices), a RunPodSandbox/CreateContainer failing at each step leaving nothing, and two
# daemons on one host. The whole suite there: hack/vm/run.sh -- hack/vm/suite.sh (docs/testing.md).
# In the same boot, critest under each driver (hack/vm/critest.sh): its images from
# test-images/critest on a registry on the guest's loopback, critest from ../shared/bin (SKIP
# where absent); the digest spec is known to fail offline and counts as ignored. Then critest
# once more on the crun handler (--runtime-handler crun, systemd driver), counted the same.
# Between the suite and critest, the kind node test (hack/kind/lane-test.sh): a node per cgroup
# driver (systemd, then cgroupfs), with a real kubelet's pods, and critest inside the systemd node.
echo "== VM lane (cgroup v2 + systemd)"
if command -v qemu-system-x86_64 >/dev/null && command -v mmdebstrap >/dev/null; then
  shares=()
  critest=${BOSUN_CRITEST:-$(readlink -f ../shared/bin/critest 2>/dev/null || true)}
  if [ -n "$critest" ] && [ -x "$critest" ]; then
    critest=$(readlink -f "$critest")
    shares+=(--share "$(dirname "$critest")" --env "BOSUN_CRITEST=$critest")
  fi
  # ../shared/bin in the guest at the same path: the kubelet checkpoint trials
  # (cri::checkpoint::kubelet_*) and the kind node test find the kubelet and crictl there.
  shared_bin="$(readlink -f ../shared/bin 2>/dev/null || true)"
  [ -z "$shared_bin" ] || [ ! -d "$shared_bin" ] || shares+=(--share "$shared_bin")
  # And the kind node test (hack/kind/lane-test.sh), with a node image of the bosun
  # `cargo test` just built; it says SKIP without crictl (../shared/bin).
  if node_image=$(hack/kind/build.sh 2>>target/test.log); then
    shares+=(--share "$(dirname "$node_image")")
  else
    echo "kind node image: hack/kind/build.sh failed (target/test.log)" | tee -a target/test.log
    node_image=
  fi
  # shellcheck disable=SC2016
  hack/vm/run.sh --timeout 7200 "${shares[@]}" --env "KIND_IMAGE=$node_image" --env "KIND_BIN=$shared_bin" -- sh -c '
    hack/vm/suite.sh "$@"; s=$?
    if [ -n "$KIND_IMAGE" ]; then hack/kind/lane-test.sh "$KIND_IMAGE" "$KIND_BIN" || s=1; else s=1; fi
    hack/vm/critest.sh || s=1
    hack/vm/critest.sh --drivers systemd --handler crun || s=1
    exit $s' lane "${VM_SUBSET[@]}" 2>&1 | tee -a target/test.log
  vm_status=${PIPESTATUS[0]}
  [ "$vm_status" -eq 0 ] || status=$vm_status
else
  reason="needs qemu-system-x86 and mmdebstrap (hack/setup.sh installs them)"
  echo "SKIP vm-lane: $reason" | tee -a target/test.log
  echo "test result: ok. 0 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out (vm lane skipped)" >>target/test.log
fi
set -e
# One closing line over every test binary (ignored = skipped with a printed SKIP reason).
awk '/^test result:/ { p += $4; f += $6; i += $8 }
     END { printf "tests: %d passed, %d failed, %d skipped\n", p, f, i }' target/test.log
exit "$status"
