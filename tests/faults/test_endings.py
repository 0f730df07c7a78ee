"""Issue 25, item 8: every way a run can end badly ends in exactly one line on stderr (a table of cases)."""

import json
import logging
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import pytest
from faults.fault_runs import ROOT, cli_env, train_command, write_config_file

from normjax import io
from normjax.train import checkpoint, data_text

CASES = {}  # name -> (command(tmp_path), ready(tmp_path) before the Ctrl-C or None, expected rc, line pattern)


def case(name, command, ready, rc, pattern):
    CASES[name] = (command, ready, rc, pattern)


def _train(tmp_path, **overrides):
    config = write_config_file(tmp_path / "config.py", **overrides)
    return train_command(config, tmp_path / "run")


def _report(tmp_path, workdir):
    return [sys.executable, str(ROOT / "scripts" / "report.py"), f"--workdir={workdir}"]


case(
    "train: Ctrl-C",
    lambda t: _train(t, train__num_steps=100_000),
    lambda t: (t / "run" / "checkpoints" / "10" / checkpoint.MANIFEST).exists(),
    130,
    r"^interrupted: kept the checkpoint at step \d+ in .*/run/checkpoints; rerun the same command to resume$",
)
case(
    "sweep of 2 workers: Ctrl-C",
    lambda t: [sys.executable, "-m", "faults.fault_sweep_main", "--config=:quick", f"--workdir={t}", "--progress=0"],
    lambda t: len(list(t.glob("sweep/*/metrics.jsonl"))) == 2,  # both workers train
    130,
    r"^interrupted: kept 0 finished runs in .*/sweep and the newest checkpoints of the others; rerun the same",
)
case(
    "study: Ctrl-C",
    lambda t: [sys.executable, "-m", "normjax.studies.ln_jacobian", f"--workdir={t}", "--progress=false"],
    lambda t: (t / "ln_jacobian" / "partial" / "config.json").exists(),
    130,
    r"^interrupted: kept \d+ computed pieces in .*/ln_jacobian/partial; rerun the same command to resume$",
)
case("report: missing workdir", lambda t: _report(t, t / "nowhere"), None, 2, r"^error: --workdir='.*nowhere' is not a")
case("report: empty workdir flag", lambda t: _report(t, ""), None, 2, r"^error: --workdir='' is not a folder")


def _lm_folder(tmp_path) -> pathlib.Path:
    folder = tmp_path / "corpus"
    folder.mkdir()
    for name in "abc":
        (folder / f"{name}.py").write_text("x = 1\n" * 400)
    (folder / "z.py").write_text("")  # last in sorted order: the validation file
    return folder


case(
    "bytes_lm: empty last file",
    lambda t: _train(t, data__task="bytes_lm", data__path=str(_lm_folder(t)), model__arch="decoder"),
    None,
    2,
    r"^(config|data) error: config.data.path=.*corpus': the validation split is empty: .*corpus/z.py \(bytes_lm",
)


@pytest.mark.parametrize("name", list(CASES))
def test_ends_in_one_line(tmp_path, name):
    command, ready, rc, pattern = CASES[name]
    proc = subprocess.Popen(
        command(tmp_path),
        cwd=ROOT,
        env=cli_env(tmp_path) | {"PYTHONPATH": f"{ROOT / 'tests'}:{ROOT}"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, killed whole if the test fails
        # a Ctrl-C reaches the child even when pytest itself runs in the background of a script (where the shell
        # starts it, and so every child, with SIGINT ignored: the child would then never see the signal)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        if ready is not None:
            deadline = time.time() + 240
            while proc.poll() is None and not ready(tmp_path) and time.time() < deadline:
                time.sleep(0.2)
            proc.send_signal(signal.SIGINT)  # a Ctrl-C: the main's own handler stops its workers
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # never leave a training child behind
    lines = err.strip().splitlines()
    assert proc.returncode == rc and len(lines) == 1, err[-3000:]
    assert re.search(pattern, lines[0]), lines[0]


def test_a_sparse_12_gb_file_is_read_up_to_max_bytes(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.py").write_text("a = 1\n" * 100)
    with open(folder / "b.py", "wb") as f:
        f.truncate(12 << 30)  # sparse: no disk used
    splits = data_text.load_byte_corpus(str(folder), max_bytes=100_000, valid_every=2)
    assert sum(v.size for v in splits.values()) == 100_000 + 2  # the bytes and one eos per file


def test_disk_full_tracebacks_of_orbax_threads_are_not_shown(caplog):
    """What orbax's writer threads and leftover tasks log on a full disk is hidden: the one line says it."""
    full = ValueError("RESOURCE_EXHAUSTED: Failed to write: No space left on device [os_error_code='28']")
    with caplog.at_level(logging.ERROR):
        with pytest.raises(ValueError), checkpoint._quiet_disk_full():
            try:
                raise full
            except ValueError:
                logging.getLogger("absl").exception("_SignalingThread.run() raised an exception: %s", full)
                raise
        logging.getLogger("asyncio").error("Task exception was never retrieved", exc_info=full)
        logging.getLogger("absl").error("another error")  # not a full disk: still shown
    assert caplog.messages == ["another error"]
    for name in checkpoint.QUIETED:
        logging.getLogger(name).removeFilter(checkpoint._after_disk_full)


def test_one_line_report_refusal_of_an_altered_results_file(tmp_path):
    path = tmp_path / "cost" / "results.json"
    io.write_json(str(path), {"experiment": "cost", "config": {}, "results": {}})
    content = json.loads(path.read_text())
    content["results"] = {"x": 1}
    path.write_text(json.dumps(content))
    proc = subprocess.run(_report(tmp_path, tmp_path), cwd=ROOT, env=os.environ | {"PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith(f"error: {path} does not match the checksum")


def test_a_ctrl_c_lost_in_a_finalizer_is_not_printed_and_still_interrupts(monkeypatch):
    """The CI failure of 2026-12-07: the Ctrl-C handler's KeyboardInterrupt raised inside a finalizer (there JAX's
    gc callback) is "ignored" by Python, which printed its traceback. STOP still ends the block as interrupted;
    the lost exception reaches no unraisable hook, while other unraisable errors still do."""
    from normjax.experiments import common

    seen = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)

    class Finalized:
        def __init__(self, error=None):
            self.error = error

        def __del__(self):
            if self.error:
                raise self.error
            signal.raise_signal(signal.SIGINT)  # the handler runs here, inside __del__: Python cannot raise it
            for _ in range(1000):
                pass

    with pytest.raises(KeyboardInterrupt), common.ctrl_c_kept():
        Finalized()  # dropped at once: __del__ runs now
        Finalized(ValueError("another error"))
    assert [type(u.exc_value) for u in seen] == [ValueError]
    assert sys.unraisablehook == seen.append  # restored
