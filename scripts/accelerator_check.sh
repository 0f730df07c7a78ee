#!/usr/bin/env bash
# The accelerator check in one command (--size=tiny: under a minute on a CPU; on an H200 the default 8-minute
# budget finished only the train-step phase: run sweep and ablation alone, see benchmarks/README.md).
#   scripts/accelerator_check.sh [--size=tiny] [--out=DIR] [--budget_s=480] [--ablation_steps=200] [--phases=...]
# Runs benchmarks/accelerator_check.py (its docstring lists the phases and files) with the project's venv when
# there is one, else $PYTHON or python3 (e.g. a GPU image with jax[cuda] installed). Output: DIR, else $OUT,
# else results/accelerator_check: accelerator_check.json, accelerator_check.md and logs/.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
exec "$PYTHON" -m benchmarks.accelerator_check "$@"
