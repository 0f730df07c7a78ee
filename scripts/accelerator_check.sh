#!/usr/bin/env bash
# The accelerator runs in one command per cell group (each sized for one 10-minute call on one H100; resumes):
#   scripts/accelerator_check.sh GROUP [GROUP ...] [--tiny] [--workdir=WORKDIR] [--budget_s=540] [--pack=FILE]
#   scripts/accelerator_check.sh --merge=FILE [--workdir=WORKDIR] | --prepare=DIR | --list
# runs benchmarks/accelerator_groups.py into WORKDIR/accelerator_groups/GROUP/ and judges the groups there (its
# docstring says what it writes; --tiny or NORMJAX_TINY=1: seconds on a CPU). The older benchmark phases (train step, sweep, a short ablation) stay as
#   scripts/accelerator_check.sh --size=tiny|full [--out=DIR] [--phases=...]    (benchmarks/accelerator_check.py)
# Uses the project's venv when there is one, else $PYTHON or python3 (e.g. a GPU image with jax[cuda] installed).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ] || [[ "${1:-}" =~ ^--(list|merge|prepare) ]]; then
  exec "$PYTHON" -m benchmarks.accelerator_groups "$@"
fi
exec "$PYTHON" -m benchmarks.accelerator_check "$@"
