#!/usr/bin/env bash
# Reproduce the study at the quick preset (CPU, minutes) and build the report: scripts/reproduce.sh [WORKDIR]
# Rerunning after an interruption resumes: finished experiments are skipped, unfinished ones reuse
# their cached pieces. PRESET=standard is the committed report (about 4.7 hours on 2 cores, 2.7 of them the
# warmup study); PRESET=paper the papers' scale (accelerators).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup_env.sh
workdir="${1:-results}"
preset="${PRESET:-quick}"
mapfile -t experiments < <(python -m normjax.studies --list)  # normjax.studies.STUDIES, in report order
mkdir -p "$workdir"
start=$(date +%s)
n=${#experiments[@]}
for i in "${!experiments[@]}"; do
  name=${experiments[$i]}
  echo "[$((i + 1))/$n] $name ($preset preset, $(( $(date +%s) - start )) s elapsed)"
  python -m "normjax.studies.$name" --config=":$preset" --workdir="$workdir"
done
python scripts/report.py --workdir="$workdir" --wall_time_s=$(( $(date +%s) - start ))
echo "Done in $(( $(date +%s) - start )) s. Report: $workdir/REPORT.md (figures beside it)."
