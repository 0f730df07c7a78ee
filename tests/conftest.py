"""Shared pytest setup: CPU only, quiet logs."""

import gc
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
if "NORMJAX_COMPILATION_CACHE" not in os.environ:  # the controller: one fresh persistent XLA cache for this session
    import atexit
    import shutil
    import tempfile

    _cache = tempfile.mkdtemp(prefix="normjax-test-xla-")  # xdist workers and the CLI subprocesses inherit it:
    os.environ["NORMJAX_COMPILATION_CACHE"] = _cache  # 256 -> 199 s on the subprocess-heavy tests (measured)
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture
def x64():
    """Run the test with 64-bit floats enabled; yields jnp.float64."""
    with jax.enable_x64(True):
        yield jnp.float64


@pytest.fixture(autouse=True, scope="module")
def _free_compiled_programs():
    """Drops JAX's compiled programs after each test module. A long-lived xdist worker otherwise keeps every
    program it compiled: each holds memory maps for its code, and after several hundred tests a worker neared
    the kernel's vm.max_map_count (65530) and segfaulted inside XLA's compiler (maps measured per test)."""
    yield
    jax.clear_caches()
    gc.collect()
