"""Independent pieces of work side by side: threads of this process, or worker processes with one XLA thread each."""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool

import jax

from normjax import host_memory
from normjax.io import WorkdirError

ONE_THREAD_FLAGS = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
PARALLEL = ("threads", "processes")


def choose_workers(requested: int, num_items: int) -> int:
    """How many workers: `requested` when > 0; 0 (auto) means one per CPU core on the CPU backend (measured
    faster than one run at a time using every core: benchmarks/README.md, sweep) and 1 on accelerators, whose
    one device they would share. Never more than `num_items`.

    Raises:
      ValueError: a negative `requested`.
    """
    if requested < 0:
        raise ValueError(f"workers must be >= 0 (0: automatic), got {requested}")
    if requested == 0:
        requested = (os.cpu_count() or 1) if jax.default_backend() == "cpu" else 1
    return max(1, min(requested, num_items))


def _setup_worker() -> None:
    """Runs in each worker before any jax computation (XLA reads XLA_FLAGS when its backend starts): one XLA
    thread, and freed host memory kept (`normjax.host_memory`) as in the parent's experiment main."""
    host_memory.keep_freed_memory()
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {ONE_THREAD_FLAGS}".strip()


def run_side_by_side(fn: Callable, calls: list[dict], workers: int, parallel: str = "processes") -> list:
    """[fn(**kwargs) for kwargs in calls], `workers` at a time: threads of this process sharing its compiled
    programs and XLA's thread pool (`parallel="threads"`), or spawned processes (`run_in_workers`).

    An exception raised by `fn` is raised here with its type and message.

    Raises:
      ValueError: `parallel` is neither "threads" nor "processes".
    """
    if parallel not in PARALLEL:
        raise ValueError(f"parallel must be one of {PARALLEL}, got {parallel!r}")
    if parallel == "processes":
        return run_in_workers(fn, calls, workers)
    with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="normjax-worker") as pool:
        futures = [pool.submit(fn, **kwargs) for kwargs in calls]
        return [f.result() for f in futures]


def run_in_workers(fn: Callable, calls: list[dict], workers: int) -> list:
    """[fn(**kwargs) for kwargs in calls], in `workers` fresh (spawned) processes.

    An exception raised by `fn` in a worker is raised here with its type and message.

    Raises:
      WorkdirError: when a worker process dies (killed, out of memory) instead of returning.
      ValueError: NORMJAX_KEEP_FREED_MEMORY is neither 0 nor 1 (`normjax.host_memory`).
    """
    host_memory.requested()  # a bad setting is this caller's ValueError, not a worker dying at its start
    context = multiprocessing.get_context("spawn")  # fork would copy this process's running XLA threads
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context, initializer=_setup_worker) as pool:
        futures = [pool.submit(fn, **kwargs) for kwargs in calls]
        try:
            return [f.result() for f in futures]
        except BrokenProcessPool:
            raise WorkdirError(
                "a worker process died (killed or out of memory) before finishing its runs; rerun to resume: "
                "finished runs are kept"
            ) from None
