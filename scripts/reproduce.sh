#!/usr/bin/env bash
# Reproduce the study at the quick preset (CPU, minutes) and build the report: scripts/reproduce.sh [WORKDIR]
# Rerunning after an interruption resumes: finished experiments are skipped, unfinished ones reuse
# their cached pieces. PRESET=standard is the committed report (about an hour here); PRESET=paper the papers'
# scale (accelerators).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup_env.sh
workdir="${1:-results}"
preset="${PRESET:-quick}"
experiments=(hidden_norms ln_jacobian grad_norms_at_init depth_scaling jacobian_spectrum amplification
             deep_training warmup_ablation cost)
mkdir -p "$workdir"
start=$(date +%s)
n=${#experiments[@]}
for i in "${!experiments[@]}"; do
  name=${experiments[$i]}
  if [ ! -f "normjax/experiments/$name.py" ]; then
    echo "[$((i + 1))/$n] $name: not in this checkout, skipped"
    continue
  fi
  echo "[$((i + 1))/$n] $name ($preset preset, $(( $(date +%s) - start )) s elapsed)"
  if [ "$name" = warmup_ablation ]; then  # its --workdir is the sweep folder itself
    python -m "experiments.$name" --config="normjax/experiments/configs/$name.py:$preset" --workdir="$workdir/$name"
  else
    python -m "experiments.$name" --config="normjax/experiments/configs/$name.py:$preset" --workdir="$workdir"
  fi
done
python scripts/report.py --workdir="$workdir" --wall_time_s=$(( $(date +%s) - start ))
echo "Done in $(( $(date +%s) - start )) s. Report: $workdir/REPORT.md (figures beside it)."
