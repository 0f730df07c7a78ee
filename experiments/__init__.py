"""Repository shims: `python -m experiments.<name>` runs the packaged CLI `normjax.experiments.<name>`."""

import os

# OpenBLAS (numpy's and jaxlib's LAPACK) threads spin against each other on a small shared CPU: the many
# small SVDs of the studies ran 10-100x slower with them. Set before any experiment imports numpy.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
