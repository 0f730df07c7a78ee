"""Independent pieces of work side by side: threads of this process, or worker processes with one XLA thread each."""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool

import jax
import tqdm

from normjax import host_memory
from normjax.io import WorkdirError

ONE_THREAD_FLAGS = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
PARALLEL = ("threads", "processes")
PR_SET_PDEATHSIG = 1  # linux/prctl.h
PARENT_CHECK_S = 1.0  # how often a worker checks that its parent still runs


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


def _die_with(parent: int) -> None:
    """Ends this worker when process `parent` ends, however it ends (kill -9 too), so no worker trains on
    alone or keeps its run's lock: the kernel's parent-death signal (Linux prctl), and a thread that checks
    the parent every PARENT_CHECK_S seconds (other systems, or a parent that died before the prctl)."""
    with contextlib.suppress(AttributeError, OSError):  # no prctl outside Linux
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_CHECK_S)
        os.kill(os.getpid(), signal.SIGKILL)

    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGKILL)
    threading.Thread(target=watch, name="normjax-parent-watch", daemon=True).start()


def _setup_worker(parent: int) -> None:
    """Runs in each worker before any jax computation (XLA reads XLA_FLAGS when its backend starts): one XLA
    thread, and freed host memory kept (`normjax.host_memory`) as in the parent's experiment main. The worker
    ignores Ctrl-C (the parent stops it), ends with its parent (`_die_with`) and holds no semaphore that a
    kill would leave behind (the resource tracker would warn of it)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with(parent)
    tqdm.tqdm.set_lock(threading.RLock())  # not its default semaphore, which a killed worker would leak
    host_memory.keep_freed_memory()
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {ONE_THREAD_FLAGS}".strip()


@contextlib.contextmanager
def _sigint_ignored():
    """SIGINT ignored while workers are started (in the main thread): they inherit it, so a Ctrl-C to the whole
    terminal never prints a KeyboardInterrupt from a worker still starting; the parent stops them."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def run_side_by_side(
    fn: Callable, calls: list[dict], workers: int, parallel: str = "processes", stop: threading.Event | None = None
) -> list:
    """[fn(**kwargs) for kwargs in calls], `workers` at a time: threads of this process sharing its compiled
    programs and XLA's thread pool (`parallel="threads"`), or spawned processes (`run_in_workers`).

    An exception raised by `fn` is raised here with its type and message. A Ctrl-C here stops every worker:
    processes at once, threads when `fn` next checks `stop` (set until this returns).

    Raises:
      ValueError: `parallel` is neither "threads" nor "processes".
    """
    if parallel not in PARALLEL:
        raise ValueError(f"parallel must be one of {PARALLEL}, got {parallel!r}")
    if parallel == "processes":
        return run_in_workers(fn, calls, workers)
    with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="normjax-worker") as pool:
        futures = [pool.submit(fn, **kwargs) for kwargs in calls]
        try:
            return [f.result() for f in futures]
        except (KeyboardInterrupt, SystemExit):  # a Ctrl-C: the other threads stop too (at their next check)
            if stop is not None:
                stop.set()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        finally:
            if stop is not None:
                stop.clear()


def run_in_workers(fn: Callable, calls: list[dict], workers: int) -> list:
    """[fn(**kwargs) for kwargs in calls], in `workers` fresh (spawned) processes.

    An exception raised by `fn` in a worker is raised here with its type and message.

    The workers end with this process (kill -9 too: `_die_with`); a Ctrl-C here kills them at once (what they
    finished and checkpointed stays).

    Raises:
      WorkdirError: when a worker process dies (killed, out of memory) instead of returning.
      ValueError: NORMJAX_KEEP_FREED_MEMORY is neither 0 nor 1 (`normjax.host_memory`).
    """
    host_memory.requested()  # a bad setting is this caller's ValueError, not a worker dying at its start
    context = multiprocessing.get_context("spawn")  # fork would copy this process's running XLA threads
    pool = concurrent.futures.ProcessPoolExecutor(
        workers, mp_context=context, initializer=_setup_worker, initargs=(os.getpid(),)
    )
    try:
        with _sigint_ignored():
            futures = [pool.submit(fn, **kwargs) for kwargs in calls]
        return [f.result() for f in futures]
    except BrokenProcessPool:
        raise WorkdirError(
            "a worker process died (killed or out of memory) before finishing its runs; rerun to resume: "
            "finished runs are kept"
        ) from None
    except (KeyboardInterrupt, SystemExit):
        for process in list(pool._processes.values()):  # noqa: SLF001 (no public way to end the workers now)
            process.kill()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
