"""Issue 12, clean errors: corrupt result files name themselves, a full disk is one line, files are 0644, no
temporary files survive a killed writer."""

import json
import logging
import os
import signal
import subprocess
import sys

import orbax.checkpoint as ocp
import pytest
from faults.fault_runs import ROOT, interrupted_study, train

from normjax import io
from normjax.studies import runner
from normjax.train.records import MetricsLog


def test_corrupt_config_json_is_named(killed):
    (killed / "config.json").write_text('{"model": ')
    with pytest.raises(io.WorkdirError, match=rf"{killed / 'config.json'} is corrupt \(not JSON"):
        train(killed)


def _compute(config, study):
    return {"v": study.cached("piece", lambda: {"v": 3})["v"]}


def _study(workdir):
    return runner.run_study("toy", str(workdir), {"a": 1}, _compute, lambda results, study: [])


@pytest.mark.parametrize("content", ["{", "[]"])
def test_corrupt_results_json_is_named(tmp_path, content):
    _study(tmp_path)
    (tmp_path / "toy" / "results.json").write_text(content)
    with pytest.raises(io.WorkdirError, match=r"toy/results.json is corrupt"):
        _study(tmp_path)


def test_corrupt_partial_piece_is_named_and_computed_again(tmp_path, caplog):
    partial = interrupted_study(tmp_path, {"a": 1}, _compute)
    (partial / "piece.json").write_text("{tor")
    with caplog.at_level(logging.WARNING):
        assert _study(tmp_path)["results"] == {"v": 3}
    assert "partial/piece.json is corrupt" in caplog.text and "computing it again" in caplog.text


def _full_disk(monkeypatch):
    """Every atomic write's temporary file goes to /dev/full (ENOSPC from the kernel on flush)."""
    fdopen = os.fdopen

    def to_dev_full(fd, mode):
        os.close(fd)
        return fdopen(os.open("/dev/full", os.O_WRONLY), mode)

    monkeypatch.setattr(os, "fdopen", to_dev_full)


def test_disk_full_is_one_line_and_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "summary.json"
    io.write_json(str(path), {"old": 1})
    _full_disk(monkeypatch)
    with pytest.raises(io.WorkdirError, match=rf"^disk full: writing {path} needs \d+ bytes, \d+ bytes free"):
        io.write_json(str(path), {"new": 2})
    assert io.read_checked(str(path)) == ({"old": 1}, True)
    assert os.listdir(tmp_path) == ["summary.json"]  # no temporary file left


def test_disk_full_on_the_metrics_log():
    with pytest.raises(io.WorkdirError, match=r"^disk full: writing /dev/full needs \d+ bytes"):
        MetricsLog("/dev/full").append({"step": 0, "train/loss": 1.0})


def test_disk_full_on_a_checkpoint(tmp_path, monkeypatch):
    def full(*args, **kwargs):  # what tensorstore raises when the disk is full
        raise ValueError("Error writing local file: [OS error 28: No space left on device]")

    monkeypatch.setattr(ocp.CheckpointManager, "save", full)
    folder = tmp_path / "run" / "checkpoints" / "10"
    with pytest.raises(io.WorkdirError, match=rf"^disk full: writing {folder} needs \d+ bytes"):
        train(tmp_path / "run")
    steps = [json.loads(line)["step"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [0, 10]  # the records before it are intact


def test_results_and_logs_are_readable_by_the_group(killed):
    old = os.umask(0o022)
    try:
        with open(killed / "metrics.jsonl", "a") as f:
            f.write('{"step": 4')  # a torn line: the rerun rewrites the log atomically
        train(killed)
    finally:
        os.umask(old)
    for name in ("config.json", "summary.json", "metrics.jsonl", "checkpoints/20/normjax_sha256.json"):
        assert os.stat(killed / name).st_mode & 0o777 == 0o644, name


def test_no_stray_tmp_files_after_a_kill(tmp_path):
    interrupted_study(tmp_path, {"a": 1}, _compute)
    partial = tmp_path / "toy"  # the study folder: partial/ goes when the study finishes
    # a writer killed between creating its temporary file and renaming it
    code = "import tempfile, sys; tempfile.mkstemp(dir=sys.argv[1], prefix=f'.tmp-{__import__(\"os\").getpid()}-')"
    code += "; print('written', flush=True); input()"
    writer = subprocess.Popen(
        [sys.executable, "-c", code, str(partial)], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert writer.stdout.readline() == b"written\n"
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    live = partial / f".tmp-{os.getpid()}-live.json"  # a live writer's file is left alone
    live.write_text("")
    assert len([n for n in os.listdir(partial) if n.startswith(".tmp-")]) == 2
    _study(tmp_path)
    assert [n for n in os.listdir(partial) if n.startswith(".tmp-")] == [live.name]


def _write_mode_opens(path) -> list[int]:
    """The lines of each open/fdopen call in `path` whose mode writes in place ('w', 'x' or '+'; appends pass)."""
    import ast

    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        name = getattr(getattr(node, "func", None), "id", None) or getattr(getattr(node, "func", None), "attr", None)
        if not isinstance(node, ast.Call) or name not in ("open", "fdopen"):
            continue
        modes = [a for a in node.args[1:2] if isinstance(a, ast.Constant)]
        modes += [k.value for k in node.keywords if k.arg == "mode" and isinstance(k.value, ast.Constant)]
        if any(isinstance(m.value, str) and set(m.value) & set("wx+") for m in modes):
            found.append(node.lineno)
    return found


def test_every_writer_in_the_package_replaces_atomically(tmp_path):
    """Issue 36: no bare write-mode open in normjax/ but the one inside io's atomic writer (write_bytes)."""
    package = ROOT / "normjax"
    found = [f"{p.relative_to(ROOT)}:{line}" for p in sorted(package.rglob("*.py")) for line in _write_mode_opens(p)]
    assert [hit.split(":")[0] for hit in found] == ["normjax/io.py"], found
    sample = tmp_path / "sample.py"  # the scanner sees each spelling
    sample.write_text('open(p, "w")\nos.fdopen(fd, mode="wb")\nopen(p, "r+b")\nopen(p, "a")\nopen(p)\n')
    assert _write_mode_opens(sample) == [1, 2, 3]


@pytest.mark.parametrize("kind", ["link outside", "folder"])
def test_a_write_onto_a_link_or_a_folder_is_refused(tmp_path, kind):
    """Before: REPORT.md a link replaced the file it pointed to (outside the workdir); a folder: IsADirectoryError."""
    outside, path = tmp_path / "outside.txt", tmp_path / "workdir" / "REPORT.md"
    outside.write_text("precious\n")
    path.parent.mkdir()
    path.symlink_to(outside) if kind == "link outside" else path.mkdir()
    words = "is a symbolic link" if kind == "link outside" else "is a folder"
    with pytest.raises(io.WorkdirError, match=rf"^{path} {words}"):
        io.write_text(str(path), "report\n")
    assert outside.read_text() == "precious\n" and (path.is_symlink() or path.is_dir())
    assert sorted(p.name for p in path.parent.iterdir()) == ["REPORT.md"]  # no temporary file left


def test_a_cached_piece_that_is_a_folder_is_set_aside_and_computed_again(tmp_path, caplog):
    """Before: IsADirectoryError from the runner's cache."""
    partial = interrupted_study(tmp_path, {"a": 1}, _compute)
    (partial / "piece.json").unlink(missing_ok=True)
    (partial / "piece.json").mkdir()
    with caplog.at_level(logging.WARNING):
        assert _study(tmp_path)["results"] == {"v": 3}
    assert (
        "piece.json is a folder, not a JSON file" in caplog.text and "set aside as piece.json.rejected" in caplog.text
    )
