"""Build WORKDIR/REPORT.md from the experiments' results.json files.

python scripts/report.py --workdir=results
"""

from absl import app, flags

from normjax.report.build import build_report

_WORKDIR = flags.DEFINE_string("workdir", "results", "Folder holding <experiment>/results.json.")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    print(f"report: {build_report(_WORKDIR.value)}")


if __name__ == "__main__":
    app.run(main)
