"""kill -9 mid-run, rerun: the same metrics.jsonl and summary as an uninterrupted run."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

from normjax.train import records

ROOT = pathlib.Path(__file__).resolve().parents[2]
MORE = {
    "train.num_steps": 200,
    "train.checkpoint_every": 20,
    "train.eval_every": 100,
    "train.bleu_examples": 0,
    "model.dropout": 0.1,
}


def _write_config(path: pathlib.Path, overrides: dict) -> None:
    path.write_text(
        "from normjax.train.config_io import default_config\n\n\n"
        "def get_config(arg=None):\n"
        "    config = default_config()\n"
        f"    for key, value in {overrides!r}.items():\n"
        "        section, name = key.split('.')\n"
        "        config[section][name] = value\n"
        "    return config\n"
    )


def _command(config: pathlib.Path, workdir: pathlib.Path) -> list[str]:
    return [sys.executable, "-m", "experiments.train", f"--config={config}", f"--workdir={workdir}", "--progress=false"]


def _checkpoints(workdir: pathlib.Path) -> list[str]:
    folder = workdir / "checkpoints"
    return [p for p in os.listdir(folder) if p.isdigit()] if folder.exists() else []


def _clean(summary: dict) -> dict:
    return {k: v for k, v in summary.items() if k not in ("wall_time_s", "steps_per_s")}


def test_kill9_then_rerun_equals_an_uninterrupted_run(tmp_path, tiny_overrides):
    config = tmp_path / "tiny_config.py"
    _write_config(config, tiny_overrides | MORE)
    ref_dir, run_dir = tmp_path / "ref", tmp_path / "run"
    # a shared persistent compilation cache lets the rerun skip compiling
    env = os.environ | {
        "JAX_PLATFORMS": "cpu",
        "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "xla"),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    }
    # the reference run first: it fills the compilation cache, so the other two start fast
    ref = subprocess.run(_command(config, ref_dir), cwd=ROOT, env=env, capture_output=True, timeout=180)
    assert ref.returncode == 0, ref.stderr.decode()[-2000:]
    victim = subprocess.Popen(
        _command(config, run_dir), cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.time() + 120
    while not _checkpoints(run_dir) and victim.poll() is None and time.time() < deadline:
        time.sleep(0.005)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    assert _checkpoints(run_dir), "the run was killed before its first checkpoint"
    assert not (run_dir / "summary.json").exists(), "the run finished before it could be killed"

    rerun = subprocess.run(_command(config, run_dir), cwd=ROOT, env=env, capture_output=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr.decode()[-2000:]
    got = records.read_jsonl(str(run_dir / "metrics.jsonl"))
    want = records.read_jsonl(str(ref_dir / "metrics.jsonl"))
    assert [r["step"] for r in got] == [0] + list(range(10, 201, 10))
    assert got == want
    assert _clean(records.read_json(str(run_dir / "summary.json"))) == _clean(
        records.read_json(str(ref_dir / "summary.json"))
    )
    assert json.loads((run_dir / "config.json").read_text()) == json.loads((ref_dir / "config.json").read_text())
