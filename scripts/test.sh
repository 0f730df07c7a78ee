#!/usr/bin/env bash
# Run the test suite (sets up .venv on first use). Extra arguments go to pytest, e.g. scripts/test.sh -k jacobian
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup_env.sh
workers=$(( $(nproc) < 2 ? 1 : 2 ))
# The suite is compile-bound: XLA's backend at optimisation level 0 compiles about a third faster (the whole suite
# 1720 -> 1283 s on 2 cores, 2026-12-07). Same programs and semantics; the last bits of a rounding may differ from
# a default build, so a test that compares two processes bit for bit passes both the same XLA_FLAGS.
export XLA_FLAGS="${XLA_FLAGS:+$XLA_FLAGS }--xla_backend_optimization_level=0"
set +e
python -m pytest -n "$workers" --durations=15 "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "scripts/test.sh: pytest collected no tests; that is a failure, not a pass" >&2
  exit 1
fi
exit "$status"
