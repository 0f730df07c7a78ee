"""Keep freed host memory in the process (glibc malloc), so XLA's per-step CPU buffers stop page-faulting."""

from __future__ import annotations

import ctypes
import os
import platform

OPT_OUT_VAR = "NORMJAX_KEEP_FREED_MEMORY"  # "0": leave malloc as it is; "1" (the default): keep freed memory
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # mallopt parameters, <malloc.h>
_TRIM_BYTES = 2**31 - 1  # the largest value mallopt's int takes: free memory at the heap's top is kept up to this
_kept = False  # set by a call that took effect: nothing here undoes it


def requested() -> bool:
    """Whether NORMJAX_KEEP_FREED_MEMORY asks for it: "1" or unset, True; "0", False.

    Raises:
      ValueError: any other value.
    """
    wanted = os.environ.get(OPT_OUT_VAR, "1")
    if wanted not in ("0", "1"):
        raise ValueError(f"{OPT_OUT_VAR} must be 0 or 1, got {wanted!r}")
    return wanted == "1"


def keep_freed_memory() -> bool:
    """Makes glibc malloc keep freed memory for reuse instead of returning it to the operating system.

    By default glibc serves every allocation above its (adaptive) mmap threshold with a fresh `mmap` and unmaps
    it on `free`. XLA's CPU runtime allocates each step's buffers anew, so those steps touch fresh pages and
    page-fault on every one: the Sandwich-LN step at d 128 took 27 ms instead of 17 ms, with 10,000 page faults
    per step (benchmarks/README.md, "host memory"). This turns mmap off for allocations (`M_MMAP_MAX` 0; the heap
    grows with `brk` instead) and keeps up to 2 GiB free at the heap's top (`M_TRIM_THRESHOLD`). The cost: the
    process keeps the memory of its peak, as a caching allocator does. Values computed are unchanged.

    Process-wide and idempotent; call it once at the start of a program (normjax's experiment mains and sweep
    worker processes do). Set NORMJAX_KEEP_FREED_MEMORY=0 to leave malloc alone (an earlier call in this process
    stays in effect).

    Returns:
      Whether this process keeps freed memory now: True once a call took effect; False when opted out (and no
      earlier call took effect) or the C library is not glibc.

    Raises:
      ValueError: NORMJAX_KEEP_FREED_MEMORY is set to something other than "0" or "1".
    """
    global _kept
    if requested() and not _kept and platform.libc_ver()[0] == "glibc":
        mallopt = ctypes.CDLL(None).mallopt
        mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
        _kept = mallopt(_M_MMAP_MAX, 0) == 1 and mallopt(_M_TRIM_THRESHOLD, _TRIM_BYTES) == 1
    return _kept
