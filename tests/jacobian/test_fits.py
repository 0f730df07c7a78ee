"""Fits recover known exponents, slopes and standard errors on synthetic data."""

import numpy as np
import pytest

from normjax import jacobian

X = np.array([2.0, 4, 8, 16, 32, 64, 128])


def test_exact_power_law_linear_and_log():
    fit = jacobian.power_law_fit(X, 3.0 * X**-0.5)
    np.testing.assert_allclose([fit.exponent, fit.prefactor, fit.r2], [-0.5, 3.0, 1.0], rtol=1e-12)
    assert fit.stderr < 1e-12
    np.testing.assert_allclose(fit.predict(10.0), 3.0 / np.sqrt(10.0), rtol=1e-12)
    lin = jacobian.linear_fit(X, 1.5 - 2.0 * X)
    np.testing.assert_allclose([lin.slope, lin.intercept, lin.r2], [-2.0, 1.5, 1.0], rtol=1e-12)
    log = jacobian.log_fit(X, 0.25 + 0.75 * np.log(X))
    np.testing.assert_allclose([log.a, log.b, log.r2], [0.25, 0.75, 1.0], rtol=1e-12)
    assert set(fit.to_dict()) == {"exponent", "stderr", "prefactor", "r2"}


def test_stderr_matches_the_spread_of_fitted_exponents():
    # Over many noisy data sets the fitted exponents scatter by about the reported stderr.
    rng = np.random.default_rng(0)
    fits = [jacobian.power_law_fit(X, 2.0 * X**0.7 * np.exp(0.1 * rng.normal(size=X.size))) for _ in range(2000)]
    exponents = np.array([fit.exponent for fit in fits])
    stderrs = np.array([fit.stderr for fit in fits])
    assert abs(exponents.mean() - 0.7) < 0.002
    np.testing.assert_allclose(np.sqrt(np.mean(stderrs**2)), exponents.std(), rtol=0.05)
    # Theory: sd(slope) = noise / sqrt(sum (ln x - mean)^2).
    lx = np.log(X)
    np.testing.assert_allclose(exponents.std(), 0.1 / np.sqrt(np.sum((lx - lx.mean()) ** 2)), rtol=0.05)


def test_two_points_have_infinite_stderr():
    assert jacobian.linear_fit([1.0, 2.0], [3.0, 5.0]).stderr == float("inf")


@pytest.mark.parametrize(
    ("x", "y", "match"),
    [
        ([1.0, 2.0, 3.0], [1.0, -2.0, 3.0], "y must be positive"),
        ([0.0, 2.0, 3.0], [1.0, 2.0, 3.0], "x must be positive"),
        ([1.0, 2.0, 3.0], [1.0, np.nan, 3.0], "y has non-finite"),
        ([1.0, 2.0], [1.0, 2.0, 3.0], "same number"),
        ([2.0, 2.0, 2.0], [1.0, 2.0, 3.0], "all x are equal"),
    ],
)
def test_bad_data_raises(x, y, match):
    with pytest.raises(ValueError, match=match):
        jacobian.power_law_fit(x, y)
