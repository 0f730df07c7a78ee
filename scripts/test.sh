#!/usr/bin/env bash
# Run the test suite (sets up .venv on first use). Extra arguments go to pytest, e.g. scripts/test.sh -k jacobian
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup_env.sh
workers=$(( $(nproc) < 2 ? 1 : 2 ))
set +e
python -m pytest -n "$workers" --durations=15 "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "scripts/test.sh: pytest collected no tests; that is a failure, not a pass" >&2
  exit 1
fi
exit "$status"
