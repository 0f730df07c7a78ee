"""Jacobian tests run in float64, so fast methods can be compared with exact ones tightly."""

import jax
import pytest


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield
