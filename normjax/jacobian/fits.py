"""Least-squares fits for scaling laws: power law, linear and logarithmic, with standard errors."""

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class LinearFit:
    """y = intercept + slope * x. `stderr` is the slope's standard error (inf with 2 points)."""

    slope: float
    stderr: float
    intercept: float
    r2: float

    def predict(self, x):
        return self.intercept + self.slope * np.asarray(x, np.float64)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class PowerLawFit:
    """y = prefactor * x ** exponent, fit in log-log space; `stderr` and `r2` refer to that fit."""

    exponent: float
    stderr: float
    prefactor: float
    r2: float

    def predict(self, x):
        return self.prefactor * np.asarray(x, np.float64) ** self.exponent

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class LogFit:
    """y = a + b * ln(x). `stderr` is b's standard error."""

    a: float
    b: float
    stderr: float
    r2: float

    def predict(self, x):
        return self.a + self.b * np.log(np.asarray(x, np.float64))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _as_points(x, y):
    x, y = np.asarray(x, np.float64).ravel(), np.asarray(y, np.float64).ravel()
    if x.shape != y.shape:
        raise ValueError(f"x and y need the same number of points, got {x.size} and {y.size}.")
    if x.size < 2:
        raise ValueError(f"a fit needs at least 2 points, got {x.size}.")
    for name, v in (("x", x), ("y", y)):
        if not np.all(np.isfinite(v)):
            raise ValueError(f"{name} has non-finite (NaN or inf) entries: {v}.")
    if np.ptp(x) == 0:
        raise ValueError("all x are equal; the slope is undetermined.")
    return x, y


def _require_positive(name, v):
    if np.any(v <= 0):
        raise ValueError(f"{name} must be positive for a logarithmic axis, got {v}.")


def linear_fit(x, y) -> LinearFit:
    """Ordinary least squares y = intercept + slope * x over 1-D point sets x, y."""
    x, y = _as_points(x, y)
    xc = x - x.mean()
    slope = float(np.dot(xc, y - y.mean()) / np.dot(xc, xc))
    intercept = float(y.mean() - slope * x.mean())
    ssr = float(np.sum((y - intercept - slope * x) ** 2))
    sst = float(np.sum((y - y.mean()) ** 2))
    dof = x.size - 2
    stderr = float(np.sqrt(ssr / dof / np.dot(xc, xc))) if dof > 0 else float("inf")
    r2 = 1.0 - ssr / sst if sst > 0 else 1.0
    return LinearFit(slope, stderr, intercept, r2)


def power_law_fit(x, y) -> PowerLawFit:
    """Fits y = prefactor * x^exponent by least squares of ln y on ln x (x, y > 0)."""
    x, y = _as_points(x, y)
    _require_positive("x", x)
    _require_positive("y", y)
    fit = linear_fit(np.log(x), np.log(y))
    return PowerLawFit(fit.slope, fit.stderr, float(np.exp(fit.intercept)), fit.r2)


def log_fit(x, y) -> LogFit:
    """Fits y = a + b ln x by least squares (x > 0)."""
    x, y = _as_points(x, y)
    _require_positive("x", x)
    fit = linear_fit(np.log(x), y)
    return LogFit(fit.intercept, fit.slope, fit.stderr, fit.r2)
