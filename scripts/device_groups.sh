#!/usr/bin/env bash
# Accelerator groups on a lent device, in three steps (benchmarks/README.md, "Accelerator groups on a lent device"):
#   scripts/device_groups.sh prepare             here: .device/ (ignored by git) gets the data the groups read
#                                                (data/: the stdlib bytes, the gettext corpus) and the wheels the
#                                                device image lacks (whl/: ml_collections, tensorboardX)
#   scripts/device_groups.sh GROUP [GROUP ...]   there, in one call (carry .device): trains the groups in order
#                                                within BUDGET_S (default 500) from the committed group folders,
#                                                then writes $OUT/groups.tar.gz (no checkpoints) and $OUT/log.txt
#   scripts/device_groups.sh merge FILE [--tiny] here: unpacks FILE into WORKDIR (default docs/results), judges
# The device returns at most 8 files of $OUT, none deeper than two folders: the run folders come back as one
# archive. Checkpoints do not travel (sizes), so a run cut off there starts again from step 0 on the next machine.
set -euo pipefail
cd "$(dirname "$0")/.."
DEVICE=.device
case "${1:-}" in
  "" | -h | --help)
    sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
  prepare)
    [ -x .venv/bin/python ] || bash -c 'source scripts/setup_env.sh'
    rm -rf "$DEVICE"
    mkdir -p "$DEVICE/whl"
    # the device's image (Python 3.12, jax 0.11, flax 0.12.10) lacks these pure-Python packages
    .venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation py \
      --platform any -d "$DEVICE/whl" "ml_collections==1.1.0" "tensorboardX==2.6.5"
    exec env PYTHON=.venv/bin/python scripts/accelerator_check.sh --prepare="$DEVICE/data"
    ;;
  merge)
    [ $# -ge 2 ] || { echo "usage: scripts/device_groups.sh merge FILE [--tiny]" >&2; exit 2; }
    exec scripts/accelerator_check.sh --merge="$2" --workdir="${WORKDIR:-docs/results}" "${@:3}"
    ;;
esac
: "${OUT:?set OUT to the folder for the archive of the groups (a device call sets it)}"
[ -d "$DEVICE/data" ] || { echo "no $DEVICE/data: run scripts/device_groups.sh prepare here, carry $DEVICE" >&2; exit 2; }
PYTHON="${PYTHON:-python3}"
if ls "$DEVICE"/whl/*.whl >/dev/null 2>&1; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/normjax_site \
    "$DEVICE"/whl/*.whl
  export PYTHONPATH="/tmp/normjax_site${PYTHONPATH:+:$PYTHONPATH}"
fi
export NORMJAX_BYTE_CORPUS="$PWD/$DEVICE/data/bytes" NORMJAX_GETTEXT_CORPUS="$PWD/$DEVICE/data/gettext"
WORK="${DEVICE_WORKDIR:-/tmp/normjax_device}"
mkdir -p "$WORK"
if [ -d docs/results/accelerator_groups ] && [ ! -d "$WORK/accelerator_groups" ]; then
  cp -r docs/results/accelerator_groups "$WORK/"  # the committed folders (their finished runs are skipped)
fi  # a second call on the same machine goes on from its own newer folders
status=0
PYTHON="$PYTHON" scripts/accelerator_check.sh "$@" --workdir="$WORK" --budget_s="${BUDGET_S:-500}" \
  --pack="$OUT/groups.tar.gz" 2>&1 | tee "$OUT/log.txt" || status=$?
exit "$status"
