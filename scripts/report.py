"""Build WORKDIR/REPORT.md from the experiments' results.json files (the installed command: normjax-report).

python scripts/report.py --workdir=results
"""

from normjax.studies.report_cli import main

if __name__ == "__main__":
    main()
