"""Issue 12, item 2: one writer per run folder; the lock dies with its process; sweep shards still share a folder."""

import signal
import subprocess
import sys

import pytest
from faults.fault_runs import ROOT, cli_env, fault_config, train, train_command, write_config_file

from normjax.io import FolderLock, WorkdirError
from normjax.train import records
from normjax.train.sweep import expand, run_sweep


def test_second_writer_is_refused(killed):
    with FolderLock(str(killed)), pytest.raises(WorkdirError, match=r"is in use by another process \(pid \d+\)"):
        train(killed)
    assert not (killed / "summary.json").exists()


def test_lock_dies_with_a_killed_process(tmp_path):
    code = f"from normjax.io import FolderLock; lock = FolderLock({str(tmp_path)!r}); print('locked', flush=True)"
    code += "; input()"
    holder = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert holder.stdout.readline() == b"locked\n"
    with pytest.raises(WorkdirError, match=rf"pid {holder.pid}\)"):
        FolderLock(str(tmp_path))
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    FolderLock(str(tmp_path)).release()  # free again


def test_two_cli_runs_started_together(tmp_path):
    """The exact reproduction: the same run started twice at once. One trains, the other exits 2 in one line."""
    config, workdir = write_config_file(tmp_path / "tiny_config.py"), tmp_path / "run"
    procs = [
        subprocess.Popen(
            train_command(config, workdir),
            cwd=ROOT,
            env=cli_env(tmp_path),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    codes = sorted(p.returncode for p in procs)
    refused = outs[[p.returncode for p in procs].index(2)][1].decode() if 2 in codes else ""
    assert codes == [0, 2], [o[1].decode()[-800:] for o in outs]
    assert refused.startswith("error: ") and "is in use by another process" in refused
    assert len(refused.strip().splitlines()) == 1
    steps = [r["step"] for r in records.read_jsonl(str(workdir / "metrics.jsonl"))]
    assert steps == [0, 10, 20, 30]


def _sweep(tmp_path):
    config = fault_config() | {"sweep": {"axes": {"train.lr": [3e-3, 1e-3]}}}
    return expand(config), tmp_path / "sweep"


def test_sweep_locks_each_run_folder(tmp_path):
    runs, folder = _sweep(tmp_path)
    busy = folder / runs[1].name
    with FolderLock(str(busy)):  # another process trains run 1
        with pytest.raises(WorkdirError, match=rf"{busy} is in use by another process"):
            run_sweep(runs, str(folder), progress=False)  # an unsharded sweep: refused at run 1
        result = run_sweep(runs, str(folder), (0, 2), progress=False)  # shard 0/2 does not touch run 1
    assert [r["status"] for r in result["runs"]] == ["done", "pending"]
    result = run_sweep(runs, str(folder), (1, 2), progress=False)
    assert [r["status"] for r in result["runs"]] == ["done", "done"]
    for run in runs:
        steps = [r["step"] for r in records.read_jsonl(str(folder / run.name / "metrics.jsonl"))]
        assert steps == [0, 10, 20, 30]
