"""Sweeps in worker threads or processes: the same numbers as one run at a time, errors and dead workers reported."""

import os
import signal

import pytest

from normjax.io import WorkdirError
from normjax.train import records
from normjax.train.config_io import ConfigError
from normjax.train.sweep import expand, run_sweep
from normjax.train.workers import choose_workers, run_in_workers, run_side_by_side


def _runs(tiny, **overrides):
    config = tiny(
        train__num_steps=6,
        train__warmup_steps=2,
        train__eval_every=6,
        train__bleu_examples=0,
        train__checkpoint_every=6,
        train__log_every=1,
        **overrides,
    )
    config["sweep"] = {"axes": {"train.lr": [1e-3, 3e-3], "train.seed": [0, 1]}}
    return expand(config)


def _losses(folder, runs):
    return {
        r.name: [
            m["train/loss"]
            for m in records.read_jsonl(os.path.join(folder, r.name, "metrics.jsonl"))
            if "train/loss" in m
        ]
        for r in runs
    }


@pytest.mark.parametrize("parallel", ["threads", "processes"])
def test_two_workers_train_every_run_to_the_same_numbers_as_one_process(tmp_path, tiny, parallel):
    runs = _runs(tiny)
    one = run_sweep(runs, str(tmp_path / "one"), progress=False)
    two = run_sweep(runs, str(tmp_path / "two"), progress=False, workers=2, parallel=parallel)
    assert [r["status"] for r in two["runs"]] == ["done"] * 4
    losses = _losses(tmp_path / "one", runs)
    assert all(len(v) == 6 for v in losses.values())
    assert _losses(tmp_path / "two", runs) == losses  # equal, not close
    assert [r["summary"]["final"] for r in two["runs"]] == [r["summary"]["final"] for r in one["runs"]]
    assert records.read_json(str(tmp_path / "two" / "sweep.json")) == two


@pytest.mark.parametrize("parallel", ["threads", "processes"])
def test_a_worker_error_keeps_its_type_and_message(tmp_path, tiny, parallel):
    """A run folder holding another config is refused inside a worker; the caller gets the same error."""
    folder = str(tmp_path)
    run_sweep(_runs(tiny), folder, progress=False)
    with pytest.raises(ConfigError, match="another config"):
        run_sweep(_runs(tiny, train__label_smoothing=0.05), folder, progress=False, workers=2, parallel=parallel)


def _die():
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_killed_worker_is_an_error_not_a_silent_gap():
    with pytest.raises(WorkdirError, match="worker process died"):
        run_in_workers(_die, [{}, {}], 2)


def test_choose_workers():
    assert choose_workers(3, 10) == 3 and choose_workers(3, 2) == 2 and choose_workers(1, 0) == 1
    assert 1 <= choose_workers(0, 100) <= (os.cpu_count() or 1)  # auto on the CPU backend: one per core
    with pytest.raises(ValueError, match="workers must be >= 0"):
        choose_workers(-1, 4)


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2"])
def test_a_bad_worker_count_is_a_config_error(tiny, bad):
    config = tiny()
    config["sweep"] = {"axes": {"train.lr": [1e-3]}, "workers": bad}
    with pytest.raises(ConfigError, match="config.sweep.workers"):
        expand(config)


def test_a_bad_parallel_mode_is_a_config_error(tiny):
    config = tiny()
    config["sweep"] = {"axes": {"train.lr": [1e-3]}, "parallel": "fibers"}
    with pytest.raises(ConfigError, match="config.sweep.parallel='fibers' must be one of threads, processes"):
        expand(config)
    with pytest.raises(ValueError, match="parallel must be one of"):
        run_side_by_side(print, [{}], 1, "fibers")
