#!/usr/bin/env bash
# The project's one test command: formatting, lints, unit tests and the integration tests
# (the real daemon over its socket, a real registry on 127.0.0.1). Integration tests need root
# and the packages/images from hack/setup.sh; where those are missing they are reported as
# ignored with the reason, never as passed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --all-targets --locked -- -D warnings
echo "== cargo test"
mkdir -p target
set +e
cargo test --locked -- --test-threads "${BOSUN_TEST_THREADS:-2}" 2>&1 | tee target/test.log
status=${PIPESTATUS[0]}
set -e
# One closing line over every test binary (ignored = skipped with a printed SKIP reason).
awk '/^test result:/ { p += $4; f += $6; i += $8 }
     END { printf "tests: %d passed, %d failed, %d skipped\n", p, f, i }' target/test.log
exit "$status"
