"""The run lock across hosts whose flock is not shared (NFS, Lustre): an O_EXCL lease with a heartbeat."""

import logging
import os
import subprocess
import sys
import time

import pytest

from normjax import io

# node-a: a process on another host, where flock does not reach (a no-op), holding the lock until stdin closes
HOLDER = """
import socket, sys
import normjax.io as io
io.fcntl.flock = lambda *args: None
socket.gethostname = lambda: sys.argv[2]
lock = io.FolderLock(sys.argv[1])
print("locked", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def other_host(monkeypatch):
    """This process as node-b, whose flock does not see node-a's."""
    monkeypatch.setattr(io.fcntl, "flock", lambda *args: None)
    monkeypatch.setattr(io.socket, "gethostname", lambda: "node-b")


def _hold(folder, host: str) -> subprocess.Popen:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(folder), host], cwd=root, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert holder.stdout.readline() == b"locked\n"
    return holder


def test_a_second_host_is_refused_until_the_first_lease_goes_stale(tmp_path, other_host, caplog):
    holder = _hold(tmp_path, "node-a")
    with pytest.raises(io.WorkdirError, match=rf"in use by another process \(pid {holder.pid} on node-a\)"):
        io.FolderLock(str(tmp_path))
    holder.kill()
    holder.wait()
    # node-a died: node-b cannot see its pid, so its lease holds until no heartbeat came for LEASE_STALE_S
    with pytest.raises(io.WorkdirError, match="node-a"):
        io.FolderLock(str(tmp_path))
    lease = tmp_path / ".lock.owner"
    then = time.time() - io.LEASE_STALE_S - 1
    os.utime(lease, (then, then))
    with caplog.at_level(logging.WARNING), io.FolderLock(str(tmp_path)):
        assert lease.read_text().startswith("node-b ")
    assert "taking over the lock of pid" in caplog.text and "no heartbeat for" in caplog.text
    assert not lease.exists()  # released: the lease is gone with it


def test_a_dead_holder_on_this_host_is_taken_over_at_once(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(io.fcntl, "flock", lambda *args: None)
    holder = _hold(tmp_path, io.socket.gethostname())
    with pytest.raises(io.WorkdirError, match=rf"pid {holder.pid} on "):
        io.FolderLock(str(tmp_path))
    holder.kill()
    holder.wait()
    with caplog.at_level(logging.WARNING), io.FolderLock(str(tmp_path)):
        pass
    assert "its process has ended" in caplog.text


def test_the_holder_renews_its_lease(tmp_path, monkeypatch):
    monkeypatch.setattr(io, "LEASE_HEARTBEAT_S", 0.05)
    with io.FolderLock(str(tmp_path)):
        lease = tmp_path / ".lock.owner"
        os.utime(lease, (0, 0))
        time.sleep(0.5)
        assert time.time() - lease.stat().st_mtime < 5
