"""keep_freed_memory: a freed large block is reused without page faults, in this process and in sweep workers."""

import ctypes
import os
import platform
import resource
import subprocess
import sys

import pytest

from normjax import host_memory
from normjax.train.workers import run_in_workers

BLOCK = 64 << 20  # above glibc's largest adaptive mmap threshold (32 MiB): served by mmap by default
PAGES = BLOCK // resource.getpagesize()

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")


def faults_of_reuse() -> int:
    """Minor page faults of writing a freshly malloc'd BLOCK after one of the same size was written and freed."""
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, (ctypes.c_size_t,)
    libc.free.argtypes = (ctypes.c_void_p,)

    def write_and_free():
        pointer = libc.malloc(BLOCK)
        ctypes.memset(pointer, 1, BLOCK)
        libc.free(pointer)

    write_and_free()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    write_and_free()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def _in_fresh_python(code: str, **env) -> list[str]:
    """stdout lines of `code` run by a new interpreter (malloc at its defaults) with `env` added."""
    script = f"from normjax import host_memory\nfrom tests.test_host_memory import faults_of_reuse\n{code}"
    done = subprocess.run(
        [sys.executable, "-c", script], env=os.environ | env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_freed_memory_is_reused_without_page_faults():
    out = _in_fresh_python(
        "print(faults_of_reuse(), host_memory.keep_freed_memory(), faults_of_reuse())", NORMJAX_KEEP_FREED_MEMORY="1"
    )
    default, took_effect, kept = int(out[0]), out[1], int(out[2])
    assert took_effect == "True"
    assert default > 0  # glibc's default: the block is unmapped on free and faults in again
    assert kept <= PAGES // 100, (default, kept)


def test_opting_out_leaves_malloc_alone():
    out = _in_fresh_python("print(host_memory.keep_freed_memory(), faults_of_reuse())", NORMJAX_KEEP_FREED_MEMORY="0")
    assert out[0] == "False" and int(out[1]) > PAGES // 100


@pytest.mark.parametrize("bad", ["", "yes", "2", " 1"])
def test_a_bad_setting_is_an_error(monkeypatch, bad):
    monkeypatch.setenv(host_memory.OPT_OUT_VAR, bad)
    with pytest.raises(ValueError, match="NORMJAX_KEEP_FREED_MEMORY must be 0 or 1"):
        host_memory.keep_freed_memory()


def test_sweep_worker_processes_keep_freed_memory(monkeypatch):
    monkeypatch.delenv(host_memory.OPT_OUT_VAR, raising=False)
    assert run_in_workers(faults_of_reuse, [{}], 1)[0] <= PAGES // 100


def test_a_bad_setting_is_the_callers_error_before_any_worker_starts(monkeypatch):
    monkeypatch.setenv(host_memory.OPT_OUT_VAR, "true")
    with pytest.raises(ValueError, match="NORMJAX_KEEP_FREED_MEMORY must be 0 or 1, got 'true'"):
        run_in_workers(faults_of_reuse, [{}], 1)


def test_opting_out_later_still_reports_what_the_process_does():
    """Nothing undoes an earlier call: a later opted-out call must not report malloc's defaults."""
    code = (
        "import os\nfirst = host_memory.keep_freed_memory()\nos.environ['NORMJAX_KEEP_FREED_MEMORY'] = '0'\n"
        "print(first, host_memory.keep_freed_memory(), faults_of_reuse())"
    )
    first, later, faults = _in_fresh_python(code, NORMJAX_KEEP_FREED_MEMORY="1")
    assert (first, later) == ("True", "True") and int(faults) <= PAGES // 100
