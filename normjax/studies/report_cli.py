"""The report command: WORKDIR/REPORT.md from the studies' results.json files (installed as normjax-report).

normjax-report --workdir=results   (in the repository also: python scripts/report.py --workdir=results)
"""

import math
import sys

from absl import app, flags

from normjax.io import WorkdirError
from normjax.studies.report import build_report

_WORKDIR = flags.DEFINE_string("workdir", "results", "Folder holding <experiment>/results.json.")
_WALL_TIME = flags.DEFINE_float(
    "wall_time_s",
    None,
    "Wall time of the whole run, for the header (reproduce.sh passes its own: a resumed run's earlier "
    "invocations are not in it).",
)


def _main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    if _WALL_TIME.value is not None and not 0 <= _WALL_TIME.value < math.inf:
        raise app.UsageError(f"--wall_time_s={_WALL_TIME.value} must be a finite number of seconds >= 0")
    try:
        path = build_report(_WORKDIR.value, wall_time_s=_WALL_TIME.value)
    except WorkdirError as e:  # a damaged results.json: one line naming it, exit 2, no report written
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    print(f"report: {path}")


def main() -> None:
    """The console entry point (pyproject.toml [project.scripts])."""
    app.run(_main)


if __name__ == "__main__":
    main()
