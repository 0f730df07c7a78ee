"""benchmarks/solvers.py's randomized subspace iteration and table, on an explicit matrix (no model compiled)."""

import numpy as np

from benchmarks import solvers


def test_randomized_top_finds_sigma_1_and_counts_matvecs():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((40, 30))
    omega = rng.standard_normal((30, solvers.BLOCK))
    s, matvecs = solvers.randomized_top(lambda v: A @ v, lambda u: A.T @ u, omega, 8)
    np.testing.assert_allclose(float(s), np.linalg.svd(A, compute_uv=False)[0], rtol=1e-4)
    assert int(matvecs) == 2 * solvers.BLOCK * 9


def test_table_gives_ratios_to_lanczos_and_unreached_accuracies():
    base = {"placement": "pre", "n": 1024, "T x d": "8x128", "first_s": 1.0, "last_err": 2e-3}
    rows = [base | {"method": "lanczos", 1e-3: (16, 0.01)}, base | {"method": "power", 1e-3: None}]
    rows.append(base | {"method": "lobpcg", 1e-3: (48, 0.02)})
    text = solvers.table(rows, [1e-3])
    assert "| lobpcg | 1.0 | 48 | 0.020 | 3.00 | 2.00 |" in text
    assert "not reached (err 2.0e-03)" in text
