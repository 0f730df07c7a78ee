"""The shared rule helpers: the all/some/none combinator and across-seed intervals that noise cannot pass."""

import math

import ml_collections
import numpy as np
import pytest

from normjax.report.rules import combine, mean_ci
from normjax.studies.seeds import seeds


def test_combine_all_some_none():
    assert combine([True, True]) == "holds"
    assert combine([True, False]) == "partly holds"
    assert combine([False, False]) == "does not hold"
    with pytest.raises(ValueError, match="at least one check"):
        combine([])


def test_mean_ci_is_the_student_t_interval():
    est = mean_ci([1.0, 2.0, 3.0])
    half = 4.302652730 * 1.0 / math.sqrt(3)  # t_{0.975, 2} (10 digits, from a t table) * sample std / sqrt(n)
    assert est.n == 3 and est.mean == pytest.approx(2.0)
    assert (est.lo, est.hi) == pytest.approx((2.0 - half, 2.0 + half), rel=1e-9)


def test_a_noisy_measurement_whose_mean_passes_does_not_pass():
    """Mean 0.52 clears a 0.5 threshold, but its interval straddles it: neither above nor below."""
    noisy = mean_ci([0.2, 0.9, 0.46])
    assert noisy.mean > 0.5 and not noisy.above(0.5) and not noisy.below(0.5)
    clean = mean_ci([0.61, 0.62, 0.63])
    assert clean.above(0.5) and clean.within(0.55, 0.7) and not clean.within(0.62, 0.7)


def test_one_seed_or_non_finite_values_never_pass():
    one = mean_ci([0.9])
    assert one.n == 1 and math.isnan(one.lo) and not one.above(0.0) and not one.within(-1, 1)
    assert "1 seed, no interval" in one.text()
    assert mean_ci([np.nan, None, 1.0, 1.0]).n == 2  # nan and None are dropped, and the count says so
    dropped = mean_ci([np.nan, 5.0, 5.01])  # 3 seeds, one non-finite: 2 values left, too few to pass anything
    assert dropped.n == 2 and not dropped.above(0.0) and not dropped.within(4.0, 6.0)
    assert mean_ci([]).n == 0 and not mean_ci([]).above(-math.inf)


def test_seeds_start_at_the_config_seed():
    assert seeds(ml_collections.ConfigDict({"seed": 4, "num_seeds": 3})) == [4, 5, 6]
