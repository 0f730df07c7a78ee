"""Issue 12, item 2: one writer per run folder; the lock dies with its process; sweep shards still share a folder."""

import logging
import signal
import subprocess
import sys
import threading
import time

import pytest
from faults.fault_runs import ROOT, cli_env, fault_config, train, train_command, write_config_file

from normjax.io import FolderLock, WorkdirError
from normjax.studies import runner
from normjax.train import records
from normjax.train.sweep import expand, run_sweep, write_status


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


def test_waiting_lock_waits_for_the_holder_and_says_so(tmp_path, caplog):
    """wait=True (sweep shards reaching the shared analysis): a busy folder is waited for, not refused."""
    held = FolderLock(str(tmp_path))
    timer = threading.Timer(0.5, held.release)
    timer.start()
    start = time.monotonic()
    with caplog.at_level(logging.WARNING), FolderLock(str(tmp_path), wait=True):
        assert time.monotonic() - start >= 0.4  # it waited for the holder
    timer.join()
    assert "is in use by another process" in caplog.text and "waiting for it" in caplog.text


def test_shard_reaching_the_analysis_while_another_computes_it_gets_its_results(tmp_path):
    """Two shards finish together: the second waits for the first's analysis and returns it (no exit 2)."""
    calls, started, release = [], threading.Event(), threading.Event()

    def compute(config, study):
        calls.append(1)
        started.set()
        release.wait(60)  # the first shard computes the analysis, holding the study folder's lock
        return {"v": config["a"]}

    def study(**kw):
        return runner.run_study("toy", "", {"a": 1}, compute, lambda r, s: [], folder=str(tmp_path), **kw)

    first = threading.Thread(target=study)
    first.start()
    assert started.wait(60)
    with pytest.raises(WorkdirError, match="in use by another process"):
        study()  # without wait: refused at once
    threading.Timer(0.5, release.set).start()  # the first shard finishes while the second waits
    assert study(wait=True)["results"] == {"v": 1}  # waits, then reads what the first shard wrote
    first.join()
    assert len(calls) == 1  # computed once


def test_sweep_status_is_written_by_one_shard_at_a_time(tmp_path):
    """sweep.json is summarized and written under its own lock, so a shard cannot overwrite a newer status."""
    runs, folder = _sweep(tmp_path)
    run_sweep(runs, str(folder), (0, 2), progress=False)
    with FolderLock(str(folder), name=".sweep.lock"):  # another shard is writing sweep.json
        writer = threading.Thread(target=write_status, args=(runs, str(folder)))
        writer.start()
        writer.join(0.5)
        assert writer.is_alive()  # waits its turn
    writer.join()
    assert [r["status"] for r in records.read_json(str(folder / "sweep.json"))["runs"]] == ["done", "pending"]
