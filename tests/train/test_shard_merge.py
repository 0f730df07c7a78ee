"""Sweep shards over hosts: SLURM array tasks (scripts/slurm_sweep.sbatch) sharing one folder merge into the
results.json that one unsharded run writes."""

import os
import pathlib
import subprocess
import sys

import pytest

from normjax.io import read_json
from normjax.train import records

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "slurm_sweep.sbatch"

# One shape (placement fixed), so each process compiles one train and one eval step; 4 runs of 4 steps.
CONFIG = """
from normjax.train.config_io import default_config, sweep_axes


def get_config(arg=""):
    config = default_config()
    config.model.update(d_model=16, num_heads=2, d_ff=32, num_layers=1, placement="pre")
    config.data.update(max_len=12, buckets=(12,), num_train=400, num_valid=32, num_test=8)
    config.train.update(
        batch_size=8, schedule="constant", num_steps=4, log_every=2, eval_every=4, checkpoint_every=4,
        bleu_examples=0, diag_every=0,
    )
    config.sweep.axes = sweep_axes(
        {"model.placement": ["pre"], "train.lr": [1e-3, 3e-3], "train.warmup_steps": [0, 2]}
    )
    return config
"""


def _array_task(workdir, task: int, count: int, config, first: int = 0, last: int | None = None):
    """scripts/slurm_sweep.sbatch as SLURM runs array task `task` of `count` (indices first..last)."""
    env = os.environ | {
        "PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "JAX_PLATFORMS": "cpu",
        "CONFIG": f"{config}:tiny",
        "SLURM_ARRAY_TASK_ID": str(task),
        "SLURM_ARRAY_TASK_MIN": str(first),
        "SLURM_ARRAY_TASK_MAX": str(first + count - 1 if last is None else last),
        "SLURM_ARRAY_TASK_COUNT": str(count),
    }
    env.pop("SLURM_SUBMIT_DIR", None)
    cmd = ["bash", str(SCRIPT), str(workdir)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait(proc) -> str:
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-3000:]
    return out


@pytest.mark.slow
def test_shards_in_one_folder_merge_into_the_unsharded_results(tmp_path):
    config = tmp_path / "grid.py"
    config.write_text(CONFIG)
    sharded, single = tmp_path / "sharded", tmp_path / "single"
    # array indices 3..4: shard 0/2 and 1/2, running at the same time on one folder; beside them a 1-task array
    procs = [_array_task(sharded, task, 2, config, first=3) for task in (3, 4)] + [_array_task(single, 0, 1, config)]
    try:
        for proc in procs:
            _wait(proc)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    study = "warmup_ablation"  # the study writes WORKDIR/warmup_ablation (scripts/slurm_sweep.sbatch)
    merged, reference = read_json(sharded / study / "results.json"), read_json(single / study / "results.json")
    assert merged["config"] == reference["config"]
    assert merged["results"] == reference["results"]  # curves, finals, numbers: equal, not just close
    assert len(merged["results"]["runs"]) == 4
    for run in merged["results"]["runs"]:
        assert run["diverged"] is False  # 4 steps: not diverged (the outcome label is judged at report time)
        steps = [r["step"] for r in records.read_jsonl(str(sharded / study / run["name"] / "metrics.jsonl"))]
        assert steps == [0, 2, 4]  # each run trained by exactly one shard: no duplicated records


def test_a_gapped_array_is_refused(tmp_path):
    # --array=0-6:2 gives 4 tasks with indices 0..6: shards would be missing, so the script must not start
    proc = _array_task(tmp_path / "wa", 2, 4, tmp_path / "grid.py", first=0, last=6)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "must be contiguous" in out
    assert not (tmp_path / "wa").exists()
