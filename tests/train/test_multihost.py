"""Multi-host data parallel: `experiments.train --distributed` in two processes (as `srun --ntasks=2` starts them)
trains exactly as one process with two devices."""

import os
import pathlib
import socket
import subprocess
import sys

import pytest

from normjax.io import read_json
from normjax.train import records

ROOT = pathlib.Path(__file__).resolve().parents[2]

TINY = {
    "data.num_train": 400,
    "data.num_valid": 32,
    "data.max_len": 12,
    "model.d_model": 16,
    "model.num_heads": 2,
    "model.d_ff": 32,
    "model.num_layers": 1,
    "train.batch_size": 8,
    "train.num_steps": 4,
    "train.warmup_steps": 2,
    "train.log_every": 2,
    "train.eval_every": 2,
    "train.checkpoint_every": 2,
    "train.bleu_examples": 4,
    "train.diag_every": 0,
}


def _train(workdir, env: dict, *flags: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "experiments.train", "--config=experiments/configs/train.py:quick"]
    cmd += [f"--workdir={workdir}", "--progress=false", *flags, *[f"--config.{k}={v}" for k, v in TINY.items()]]
    env = os.environ | {"PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"} | env
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _srun_env(rank: int, port: int) -> dict:
    """What SLURM sets for task `rank` of a 2-task step on one node; JAX's cluster detection reads it."""
    return {
        "SLURM_JOB_ID": "1",
        "SLURM_STEP_NODELIST": "localhost",
        "SLURM_NTASKS": "2",
        "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": str(rank),
        "JAX_COORDINATOR_PORT": str(port),
    }


@pytest.mark.slow
def test_two_processes_train_like_one_process_with_two_devices(tmp_path):
    port = _free_port()
    hosts = [_train(tmp_path / "hosts", _srun_env(rank, port), "--distributed") for rank in (0, 1)]
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=2".strip()
    single = _train(tmp_path / "single", {"XLA_FLAGS": flags})  # the hosts' flags too: the same compiled numerics
    try:
        outputs = [proc.communicate(timeout=600)[0] for proc in [*hosts, single]]
    finally:  # a process that died leaves its peer waiting for it: end ours, by their ids
        for proc in [*hosts, single]:
            if proc.poll() is None:
                proc.kill()
    for proc, out in zip([*hosts, single], outputs, strict=True):
        assert proc.returncode == 0, out[-3000:]
    # Each process builds the global batch and feeds its half of the rows; the gradient mean over 2 devices is
    # one addition (commutative), so every logged number equals the 2-device process's, not just to rounding.
    metrics = records.read_jsonl(str(tmp_path / "hosts" / "metrics.jsonl"))
    assert metrics == records.read_jsonl(str(tmp_path / "single" / "metrics.jsonl"))
    assert [m["step"] for m in metrics] == [0, 2, 4]  # written by process 0 only: no duplicated records
    assert "valid/bleu" in metrics[-1]
    summary, reference = read_json(tmp_path / "hosts" / "summary.json"), read_json(tmp_path / "single" / "summary.json")
    assert summary["final"] == reference["final"]
    assert summary["outcome"] == reference["outcome"] != "diverged"  # a tiny run may stall; both must agree
    assert sorted(os.listdir(tmp_path / "hosts" / "checkpoints")) == ["2"]  # orbax saved across both processes
