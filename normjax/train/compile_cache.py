"""XLA programs built: JAX's persistent compilation cache (on by default on accelerators), and a compile count."""

import collections
import contextlib
import logging
import os
import warnings

import jax
from jax.experimental.compilation_cache.compilation_cache import reset_cache

CACHE_ENV = "NORMJAX_COMPILATION_CACHE"  # a folder, or "off"; unset: ~/.cache/normjax/xla on accelerators, off on CPU
_COMPILE_LOGGER = "jax._src.interpreters.pxla"  # the logger of jax.log_compiles' "Compiling <name> ..." lines
# On the CPU the cache is opt-in: CPU compiles take seconds, which the cache saves little of, and it grows without
# bound. (The XLA crashes once blamed on it, 2026-12-05/06, were long-lived test processes running out of memory
# maps, vm.max_map_count, one set per compiled program kept; they came with the cache off too. tests/conftest.py.)
OPT_IN_BACKENDS = ("cpu",)
# Processes sharing one cache folder (a sweep's workers, array tasks, the test session) can read an entry while
# another writes it, or one that a killed process left half written: JAX then warns and compiles the program
# itself (and writes the entry anew), so only time is lost. The warning is dropped where normjax's cache is on: it
# was the second line on stderr of a sweep stopped by Ctrl-C (CI, 2026-12-07).
UNREADABLE_ENTRY = "Error reading persistent compilation cache entry"


def default_cache_dir(backend: str | None = None) -> str | None:
    """The folder for JAX's persistent compilation cache: $NORMJAX_COMPILATION_CACHE (None for "off"); unset,
    None on the CPU (opt-in there, see OPT_IN_BACKENDS) and $XDG_CACHE_HOME/normjax/xla or ~/.cache/normjax/xla
    on an accelerator. `backend`: jax.default_backend() when None."""
    chosen = os.environ.get(CACHE_ENV)
    if chosen is not None:
        return None if chosen.lower() in ("off", "") else chosen
    if (backend or jax.default_backend()) in OPT_IN_BACKENDS:
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "normjax", "xla")


def enable_compilation_cache(folder: str | None = None) -> str | None:
    """Turns on JAX's persistent compilation cache (a program compiled by an earlier process of the same jax,
    backend and flags is read back instead of compiled), unless one is set already (jax.config or
    JAX_COMPILATION_CACHE_DIR: that setting is respected), NORMJAX_COMPILATION_CACHE is "off", or the backend is
    the CPU and NORMJAX_COMPILATION_CACHE names no folder (default_cache_dir). Where a cache is on, JAX's warning
    about an unreadable entry is dropped (UNREADABLE_ENTRY).

    Args:
      folder: the cache folder; None: default_cache_dir().

    Returns:
      The cache folder in use, or None when the cache is off.
    """
    current = jax.config.jax_compilation_cache_dir
    if current:
        warnings.filterwarnings("ignore", message=UNREADABLE_ENTRY, category=UserWarning)
        return current
    folder = folder or default_cache_dir()
    if folder is None:
        return None
    warnings.filterwarnings("ignore", message=UNREADABLE_ENTRY, category=UserWarning)
    os.makedirs(folder, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", folder)
    reset_cache()  # JAX decides once per process whether a cache is used: at its first compile, maybe before this
    return folder


class _CompileCounter(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.names: collections.Counter = collections.Counter()

    def emit(self, record):
        if record.msg.startswith("Compiling ") and record.args:
            self.names[str(record.args[0])] += 1


@contextlib.contextmanager
def count_compiles():
    """Counts the XLA programs JAX lowers and compiles inside the block, by name (jit_train_step, ...), from the
    log lines of jax.log_compiles (a persistent-cache hit counts too: it is the same program built again).

    Yields:
      A collections.Counter, name -> compiles, filled as the block runs.
    """
    logger, handler = logging.getLogger(_COMPILE_LOGGER), _CompileCounter()
    level, propagate = logger.level, logger.propagate
    logger.setLevel(logging.DEBUG)
    logger.propagate = propagate and jax.config.jax_log_compiles  # the debug lines go to the counter alone
    logger.addHandler(handler)
    try:
        yield handler.names
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate
