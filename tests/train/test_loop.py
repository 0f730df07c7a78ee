"""Training jobs: the loss goes down, divergence is an outcome, finished runs are skipped."""

import json
import math
import os

import numpy as np
import pytest

from normjax.train import loop, records
from normjax.train.config_io import parse
from normjax.train.loop import run_job, run_steps


def test_tiny_run_lowers_the_loss_and_logs_diagnostics(tmp_path, tiny):
    summary = run_job(parse(tiny(train__diag_every=20)), str(tmp_path), progress=False)
    log = records.read_jsonl(str(tmp_path / "metrics.jsonl"))
    assert summary["steps"] == 40 and summary["diverged_step"] is None
    assert [r["step"] for r in log] == [0, 10, 20, 30, 40]
    initial, final = log[0]["valid/nll"], summary["final"]["valid/nll"]
    # 40 steps of a d-16 model get about as far as the token frequencies: "stalled" is judged on the unigram level
    assert summary["outcome"] == ("stalled" if final >= summary["stall_nll"] else "ok")
    assert initial > 0.9 * math.log(json.loads((tmp_path / "config.json").read_text())["model"]["vocab_size"])
    assert final < initial - 1.0
    assert 0 <= summary["final"]["valid/bleu"] <= 100
    for stack in ("encoder", "decoder"):  # diagnostics at steps 0 and 20, one value per layer
        for r in log[0], log[2]:
            (grad,), (ffn,) = r[f"diag/grad_norm/{stack}"], r[f"diag/ffn_grad_norm/{stack}"]
            assert 0 < ffn < grad and r[f"diag/norm_input_rms/{stack}"] > 0
    assert sorted(os.listdir(tmp_path)) == [".lock", "checkpoints", "config.json", "metrics.jsonl", "summary.json"]
    mtime = os.path.getmtime(tmp_path / "metrics.jsonl")
    assert run_job(parse(tiny(train__diag_every=20)), str(tmp_path), progress=False) == summary  # finished: skipped
    assert os.path.getmtime(tmp_path / "metrics.jsonl") == mtime


def test_huge_lr_is_recorded_as_diverged(tmp_path, tiny):
    summary = run_job(parse(tiny(train__lr=1e4, train__warmup_steps=0)), str(tmp_path), progress=False)
    assert summary["outcome"] == "diverged"
    assert 1 <= summary["diverged_step"] <= summary["steps"] < 40
    assert records.read_json(str(tmp_path / "summary.json"))["outcome"] == "diverged"


def test_divergence_needs_consecutive_bad_steps_and_stops_at_the_next_check(tmp_path, tiny):
    # every loss is above 0.01: the 5th bad update in a row diverges; the host checks every 5 steps
    config = tiny(
        train__divergence_loss=0.01, train__divergence_patience=5, train__divergence_check_every=5, train__diag_every=5
    )
    summary = run_job(parse(config), str(tmp_path), progress=False)
    assert summary["outcome"] == "diverged" and summary["diverged_step"] == 5 and summary["steps"] == 5
    log = records.read_jsonl(str(tmp_path / "metrics.jsonl"))
    assert log[-1]["step"] == 5 and np.isfinite(log[-1]["train/loss"])


def test_byte_level_decoder_lm_trains(tmp_path, tiny):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(6):
        (corpus / f"f{i}.py").write_text("def f(x):\n    return x + 1\n" * 40)
    config = tiny(
        model__arch="decoder",
        data__task="bytes_lm",
        data__path=str(corpus),
        data__seq_len=16,
        train__num_steps=20,
        train__eval_every=20,
    )
    summary = run_job(parse(config), str(tmp_path / "run"), progress=False)
    log = records.read_jsonl(str(tmp_path / "run" / "metrics.jsonl"))
    assert summary["outcome"] == ("stalled" if summary["final"]["valid/nll"] >= summary["stall_nll"] else "ok")
    assert "valid/bleu" not in summary["final"]
    assert summary["final"]["valid/nll"] < log[0]["valid/nll"] - 1.0


def test_run_steps_hands_each_update_to_the_hook_and_stops_when_it_asks():
    seen = []

    def on_step(done, state, out):
        seen.append((done, state, out))
        return done == 4

    assert run_steps(0, lambda state, t: (state + 10, t), 2, 9, on_step) == (20, 4)
    assert seen == [(3, 10, 2), (4, 20, 3)]  # the updates done, the new state, the step's output for batch t
    assert run_steps(0, lambda state, t: (state + 1, t), 0, 5) == (5, 5)  # no hook: every update to `stop`


def test_run_steps_stops_before_the_next_update_when_asked(monkeypatch):
    monkeypatch.setattr(loop.STOP, "is_set", lambda: True)
    with pytest.raises(KeyboardInterrupt, match="probe stopped at step 3"):
        run_steps(0, lambda state, t: (state + 1, t), 3, 9, name="probe")
