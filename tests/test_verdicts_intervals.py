"""Intervals that fit the quantity: log-scale, bootstrap and order-statistic intervals cover at their level."""

import math

import numpy as np
import pytest

from normjax.report.rules import bootstrap_ci, log_ci, mean_ci, quantile_ci

TRIALS = 200  # at 95% nominal, a coverage below 90% in 200 trials is 3.2 standard errors short


def _coverage(interval, truth, draw, seed=0) -> float:
    rng = np.random.default_rng(seed)
    hits = [(e := interval(draw(rng))).lo <= truth <= e.hi for _ in range(TRIALS)]
    return float(np.mean(hits))


def test_log_scale_interval_covers_the_median_of_a_lognormal():
    """ln X ~ N(0, 1): the t interval on the logs is exact for the median e^0 = 1, at 3 and 5 seeds."""
    for n in (3, 5):
        assert _coverage(log_ci, 1.0, lambda rng: rng.lognormal(0.0, 1.0, n)) >= 0.90  # noqa: B023


def test_log_scale_interval_is_positive_where_the_t_interval_is_not():
    """The S3 sigma_min case: heavy right tail, a t interval reaching below 0, a log-scale one never does."""
    values = [0.0005, 0.002, 0.004, 0.009, 0.02]
    assert mean_ci(values).lo < 0 < log_ci(values).lo
    assert log_ci(values).mean == pytest.approx(math.exp(np.mean(np.log(values))))
    assert log_ci([1.0, -2.0, 0.0, 3.0]).n == 2  # non-positive values of a positive quantity are dropped


def test_bootstrap_interval_covers_the_mean_of_a_skewed_law():
    """Exponential(1), 40 values: the percentile bootstrap of the mean (true value 1)."""
    assert _coverage(bootstrap_ci, 1.0, lambda rng: rng.exponential(1.0, 40)) >= 0.90


def test_bootstrap_is_reproducible_and_takes_any_reduction():
    x = np.random.default_rng(1).exponential(1.0, 30)
    assert bootstrap_ci(x, np.max) == bootstrap_ci(x, np.max)
    high = bootstrap_ci(x, np.max)
    assert high.mean == x.max() and high.hi <= x.max() and high.method == "bootstrap"


@pytest.mark.parametrize("n, q", [(20, 0.5), (60, 0.1)])
def test_order_statistic_interval_covers_a_quantile(n, q):
    """Distribution-free: [x_(j), x_(k)] covers the q-quantile of any continuous law with probability >= 95%."""
    truth = -math.log(1 - q)  # the q-quantile of Exponential(1)
    assert _coverage(lambda x: quantile_ci(x, q), truth, lambda rng: rng.exponential(1.0, n)) >= 0.90


def test_order_statistic_interval_is_open_when_too_few_values():
    """With 5 values [min, max] covers the median with probability 1 - 2/32 < 95%: the interval says so."""
    est = quantile_ci([1.0, 2.0, 3.0, 4.0, 5.0])
    assert est.lo == -math.inf and est.hi == math.inf and est.mean == 3.0
    est = quantile_ci(np.arange(20.0))
    assert (est.lo, est.hi) == (5.0, 14.0)  # x_(6), x_(15): 1 - 2 P(Bin(20, 1/2) <= 5) = 0.959
