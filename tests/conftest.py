"""Shared pytest setup: CPU only, quiet logs."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
if "NORMJAX_COMPILATION_CACHE" not in os.environ:  # the controller: one fresh persistent XLA cache for this session
    import atexit
    import shutil
    import tempfile

    _cache = tempfile.mkdtemp(prefix="normjax-test-xla-")  # xdist workers and subprocesses inherit the variable
    os.environ["NORMJAX_COMPILATION_CACHE"] = _cache  # opt-in on the CPU (compile_cache): compiles shared by the
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)  # suite's processes, never a long-lived cache

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture
def x64():
    """Run the test with 64-bit floats enabled; yields jnp.float64."""
    with jax.enable_x64(True):
        yield jnp.float64
