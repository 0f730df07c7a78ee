"""Shared pytest setup: CPU only, quiet logs."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# No persistent XLA cache shared by the test processes (two xdist workers and their sweep workers): a run of the
# suite aborted once inside jax's cache read (compilation_cache.get_executable_and_time, "Fatal Python error:
# Aborted"), and a cache that a fresh CI machine never reuses cannot pay for itself. The cache's own tests set it.
os.environ.setdefault("NORMJAX_COMPILATION_CACHE", "off")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture
def x64():
    """Run the test with 64-bit floats enabled; yields jnp.float64."""
    with jax.enable_x64(True):
        yield jnp.float64
