#!/bin/sh
# Runs integration tests inside the VM lane's guest (hack/vm/run.sh -- hack/vm/suite.sh ...),
# once per cgroup driver, and prints one summary line per driver.
#
#   hack/vm/suite.sh [--drivers "cgroupfs systemd"] [--threads N] [FILTER...]
#
# Each FILTER is a substring of test names (one integration binary run per filter; none: the
# whole suite). Every test daemon of a run uses the driver (BOSUN_TEST_CGROUP_DRIVER). Exits
# non-zero when a test failed or a run did not finish.
set -u
drivers="cgroupfs systemd"
threads=2
while [ $# -gt 0 ]; do
  case "$1" in
    --drivers) drivers="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || set -- ""

status=0
summary=""
log=$(mktemp)
for driver in $drivers; do
  echo "== driver $driver: $*"
  started=$(date +%s)
  : >"$log"
  for filter in "$@"; do
    if [ -n "$filter" ]; then
      BOSUN_TEST_CGROUP_DRIVER=$driver bosun-it --test-threads "$threads" "$filter" 2>&1 | tee -a "$log"
    else
      BOSUN_TEST_CGROUP_DRIVER=$driver bosun-it --test-threads "$threads" 2>&1 | tee -a "$log"
    fi
  done
  line=$(awk -v d="$driver" -v s="$(( $(date +%s) - started ))" '
    /^test result:/ { runs++; p += $4; f += $6; i += $8; next }
    END { printf "driver %s: %d passed, %d failed, %d skipped (%d runs, %d s)", d, p, f, i, runs, s }' "$log")
  # A run that ended without a result line (crash, panic in the harness) is a failure too.
  if grep -q '^test result: FAILED' "$log" || [ "$(grep -c '^test result:' "$log")" -ne "$#" ]; then
    status=1
  fi
  summary="$summary$line
"
done
rm -f "$log"

# What the whole run left on the node, beyond each test's own check: systemd scopes and
# slices, cgroups, mounts, processes, bridges and iptables rules of any test daemon.
leaks=$(
  {
    systemctl list-units --all --plain --no-legend 'bosun-*.scope' 'bosun_it_*' 'bosun-it-*' 2>/dev/null
    find /sys/fs/cgroup -mindepth 1 -maxdepth 3 -type d \
      \( -name 'bosun-it-*' -o -name 'bosun_it_*' -o -name 'bosun-*.scope' \) 2>/dev/null
    grep ' /var/tmp/bosun-it-' /proc/mounts
    ps -eo pid=,args= | grep -E '/var/tmp/bosun-it-' | grep -v -E 'grep|ps -eo'
    ip -o link show type bridge 2>/dev/null | grep -E ': bt[A-Za-z0-9]+[:@]'
    iptables-save 2>/dev/null | grep -E 'bosun-it-'
  } | sed 's/^/  /'
)
if [ -n "$leaks" ]; then
  echo "== node leak check: left behind"
  echo "$leaks"
  summary="${summary}node leak check: FAILED
"
  status=1
else
  summary="${summary}node leak check: clean (units, cgroups, mounts, processes, bridges, iptables)
"
fi
echo "== summary"
printf '%s' "$summary"
exit "$status"
