"""Shared pytest setup: CPU only, quiet logs."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture
def x64():
    """Run the test with 64-bit floats enabled; yields jnp.float64."""
    with jax.enable_x64(True):
        yield jnp.float64
