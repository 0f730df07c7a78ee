"""Issue 25, item 8: sweep workers end with their parent (kill -9 or Ctrl-C) and leave no run locked."""

import os
import signal
import subprocess
import sys
import time

import pytest
from faults.fault_runs import ROOT

from normjax.io import FolderLock, WorkdirError

# the parent of a sweep: two spawned workers, each holding a run folder's lock until it is stopped
PARENT = """
import sys
from faults.fault_runs import hold_lock
from normjax.train.workers import run_in_workers
run_in_workers(hold_lock, [dict(folder=sys.argv[1] + "/a"), dict(folder=sys.argv[1] + "/b")], 2)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False


def _start(tmp_path):
    env = os.environ | {"PYTHONPATH": f"{ROOT / 'tests'}:{ROOT}", "JAX_PLATFORMS": "cpu"}
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(tmp_path)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # a backgrounded shell ignores Ctrl-C
    )
    workers = [int(parent.stdout.readline().split()[1]) for _ in range(2)]
    with pytest.raises(WorkdirError, match="in use"):
        FolderLock(str(tmp_path / "a"))
    return parent, workers


def _within(seconds: float, done) -> bool:
    deadline = time.time() + seconds
    while time.time() < deadline and not done():
        time.sleep(0.1)
    return done()


def _free(folder) -> bool:
    try:
        FolderLock(str(folder)).release()
    except WorkdirError:
        return False
    return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["kill-9", "ctrl-c"])
def test_workers_end_with_their_parent_and_free_their_locks(tmp_path, sig):
    parent, workers = _start(tmp_path)
    parent.send_signal(sig)  # to the parent alone, not its process group
    assert _within(5, lambda: not any(map(_alive, workers))), "a worker outlived its parent"
    assert _within(5, lambda: _free(tmp_path / "a") and _free(tmp_path / "b")), "a run is still locked"
    parent.wait(10)
    if sig == signal.SIGINT:  # only this bare parent's own KeyboardInterrupt (the mains print one line instead)
        assert parent.stderr.read().count(b"Traceback") == 1
