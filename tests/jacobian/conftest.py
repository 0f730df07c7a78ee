"""Jacobian tests run in float64 (tests/float64_fixtures.py)."""

from float64_fixtures import float64, helpers  # noqa: F401 (fixtures)
