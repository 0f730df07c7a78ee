"""One OpenBLAS thread in normjax's own mains, set before numpy loads: on a small shared CPU, OpenBLAS threads
(numpy's and jaxlib's LAPACK) spin against each other and the studies' many small SVDs ran 10-100x slower."""

from __future__ import annotations

import os
import sys

MAIN_PREFIXES = ("normjax.", "experiments.")  # installed mains, and the repository shims


def main_module(argv: list[str]) -> str | None:
    """The module a `python [options] -m MODULE ...` command line runs (None for a script, `-c` or the REPL)."""
    args = iter(argv[1:])
    for arg in args:
        if arg == "-m":
            return next(args, None)
        if arg in ("-X", "-W", "--check-hash-based-pycs"):  # options whose value is the next argument
            next(args, None)
        elif arg == "-c" or not arg.startswith("-"):
            return None
    return None


def limit_for_mains(argv: list[str] | None = None) -> bool:
    """Sets OPENBLAS_NUM_THREADS=1 (unless the user set it) when this process is a normjax main started with
    `python -m` and numpy is not loaded yet; a library import changes nothing. Returns whether it set it."""
    module = main_module(list(getattr(sys, "orig_argv", [])) if argv is None else argv)
    if module is None or not module.startswith(MAIN_PREFIXES) or "numpy" in sys.modules:
        return False
    if "OPENBLAS_NUM_THREADS" in os.environ:
        return False
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    return True


limit_for_mains()  # on import: normjax/__init__.py imports this module before anything that loads numpy
