"""Issue 12, item 4: a finished folder never returns old results for another config (train, sweeps, studies)."""

import json
import logging
import subprocess

import pytest
from faults.fault_runs import (
    ROOT,
    assert_same_run,
    cli_env,
    fault_config,
    interrupted_study,
    train,
    train_command,
    write_config_file,
)

from normjax import io
from normjax.io import FolderLock, WorkdirError
from normjax.studies import runner
from normjax.train.config_io import ConfigError
from normjax.train.sweep import expand, run_sweep


def test_finished_run_with_another_config_is_an_error_naming_the_keys(finished):
    with pytest.raises(ConfigError, match=r"model.placement: 'post' -> 'pre'; train.num_steps: 30 -> 400"):
        train(finished, model__placement="pre", train__num_steps=400)


def test_cli_exits_2_naming_the_keys(finished, tmp_path):
    config = write_config_file(tmp_path / "other.py", **{"train.num_steps": 400})
    proc = subprocess.run(train_command(config, finished), cwd=ROOT, env=cli_env(tmp_path), capture_output=True)
    err = proc.stderr.decode()
    assert proc.returncode == 2 and err.startswith("config error: ") and len(err.strip().splitlines()) == 1
    assert "train.num_steps: 30 -> 400" in err and "--force" in err


def test_force_recomputes_with_the_new_config(finished):
    summary = train(finished, train__lr=1e-3, force=True)
    assert summary["steps"] == 30
    assert json.loads((finished / "config.json").read_text())["train"]["lr"] == 1e-3
    assert train(finished, train__lr=1e-3) == summary  # now finished for the new config


@pytest.mark.parametrize("content", ["{}", "null", '{"outcome": "ok"}', "{not json"])
def test_incomplete_summary_is_not_a_finished_run(killed, reference, content, caplog):
    (killed / "summary.json").write_text(content)
    with caplog.at_level(logging.WARNING):
        train(killed)  # resumed from checkpoint 20, with a warning naming the file
    assert f"{killed / 'summary.json'} is not a complete summary" in caplog.text
    assert_same_run(killed, reference)


def test_finished_sweep_with_another_config_is_an_error(tmp_path):
    """The warmup_ablation case: runs finished at 30 steps, the sweep rerun without its num_steps override."""
    axes = {"sweep": {"axes": {"train.lr": [3e-3, 1e-3]}}}
    folder = str(tmp_path / "sweep")
    run_sweep(expand(fault_config() | axes), folder, progress=False)
    with pytest.raises(ConfigError, match=r"train.num_steps: 30 -> 200"):
        run_sweep(expand(fault_config(train__num_steps=200) | axes), folder, (1, 2), progress=False)


def _compute(config, study):
    return {"twice": study.cached("piece", lambda: {"v": 2 * config["a"]})["v"]}


def _plot(results, study):
    return []


def _study(workdir, force=False, **config):
    return runner.run_study("toy", str(workdir), {"a": 1} | config, _compute, _plot, force=force)


def test_study_with_another_config_is_an_error_and_force_recomputes(tmp_path):
    assert _study(tmp_path)["results"] == {"twice": 2}
    with pytest.raises(ConfigError, match=r"toy/results.json was computed with another config \(a: 1 -> 5\)"):
        _study(tmp_path, a=5)
    assert _study(tmp_path, force=True, a=5)["results"] == {"twice": 10}


def test_how_runs_are_scheduled_is_not_another_config(tmp_path):
    """sweep.workers / sweep.parallel change when runs train, never their numbers: a finished study stands."""
    first = _study(tmp_path, sweep={"workers": 1, "vmap": False})
    assert _study(tmp_path, sweep={"workers": 0, "parallel": "processes", "vmap": False}) == first
    with pytest.raises(ConfigError, match=r"sweep.vmap: False -> True"):
        _study(tmp_path, sweep={"workers": 1, "vmap": True})


def test_study_partial_results_of_another_config_are_an_error(tmp_path):
    interrupted_study(tmp_path, {"a": 1}, _compute)  # an interrupted run of a=1: only partial/ is there
    with pytest.raises(ConfigError, match=r"partial/config.json was computed with another config"):
        _study(tmp_path, a=5)


def test_study_of_other_code_is_recomputed_with_a_warning(tmp_path, caplog):
    """A code change (the study's fingerprint) is not a user's config change: recompute, visibly."""
    _study(tmp_path)
    interrupted_study(tmp_path, {"a": 1}, _compute)  # and the pieces of an interrupted rerun
    for name in ("results.json", "partial/config.json"):  # both of other code (each with its checksum)
        path = str(tmp_path / "toy" / name)
        io.write_json(path, json.loads(json.dumps(io.read_json(path)).replace('"_code": "', '"_code": "old')))
    piece = str(tmp_path / "toy" / "partial" / "piece.json")
    io.write_json(piece, {"piece": {"v": 999}})  # a cached piece of the old code must not be reused
    with caplog.at_level(logging.WARNING):
        assert _study(tmp_path)["results"] == {"twice": 2}
    assert "was computed by other code of this study; computing it again" in caplog.text
    assert caplog.text.count("results.json was computed by other code") == 1  # said once, not per check


def test_study_in_use_is_refused(tmp_path):
    with FolderLock(str(tmp_path / "toy")), pytest.raises(WorkdirError, match="in use by another process"):
        _study(tmp_path)
