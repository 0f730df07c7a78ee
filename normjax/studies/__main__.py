"""`python -m normjax.studies`: the studies scripts/reproduce.sh runs, one per line, in report order."""

import sys

from normjax.studies import STUDIES


def main(argv: list[str]) -> int:
    if argv not in ([], ["--list"]):
        print("usage: python -m normjax.studies [--list]  (prints the report's studies, one per line)", file=sys.stderr)
        return 2
    for study in STUDIES:
        if study.in_report:
            print(study.name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
