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
echo "== summary"
printf '%s' "$summary"
exit "$status"
