"""warmup_ablation's run folders are reused only by the training code that trained them (runs_code)."""

import json
import os

import normjax
from normjax import io, train
from normjax.studies import runner
from normjax.studies.warmup_ablation import measure, runs_code
from normjax.train.config_io import default_config, sweep_axes


def _sweep_files() -> set[str]:
    return {os.path.relpath(f, os.path.dirname(normjax.__file__)) for f in runner.code_files(train.run_sweep)}


def test_training_code_is_the_runners_fingerprint_of_the_sweep_engine(monkeypatch):
    assert runs_code.training_code() == runner.code_fingerprint(train.run_sweep)
    files = _sweep_files()
    assert {"model.py", "placements.py", "train/steps.py", "train/optimizers.py", "train/data_text.py"} <= files
    assert "train/data_gettext.py" in files  # imported only inside functions (config_io, tasks)
    assert not {f for f in files if f.startswith(("studies/", "report/", "experiments/")) or f == "plotting.py"}
    monkeypatch.setattr(runner, "_imported_in_functions", lambda module: [])
    assert "train/data_gettext.py" not in _sweep_files()  # what the import walk missed before


def test_runs_of_other_or_unknown_code_are_dropped(tmp_path):
    folder = tmp_path / "wa"
    for name in ("a", "b", "other"):
        (folder / name).mkdir(parents=True)
    assert runs_code.drop_runs_of_other_code(str(folder), ["a", "b", "missing"]) == ["a", "b"]  # no marker: unknown
    kept = sorted([".runs_code.lock", runs_code.MARKER, "other"])  # "other" is not this sweep's: kept
    assert sorted(os.listdir(folder)) == kept
    (folder / "a").mkdir()
    assert runs_code.drop_runs_of_other_code(str(folder), ["a"]) == []  # this code trained it: kept
    io.write_json(str(folder / runs_code.MARKER), {"code": "0" * 16})
    assert runs_code.drop_runs_of_other_code(str(folder), ["a"]) == ["a"]
    assert io.read_json(str(folder / runs_code.MARKER))["code"] == runs_code.training_code()
    (folder / "a").mkdir()
    (folder / runs_code.MARKER).write_text('{"code": "')  # damaged (e.g. a kill during a hand edit): unknown code
    assert runs_code.drop_runs_of_other_code(str(folder), ["a"]) == ["a"]


def test_run_grid_retrains_runs_of_other_training_code(tmp_path):
    c = default_config()
    c.model.update(d_model=16, num_heads=2, d_ff=32, num_layers=1)
    c.data.update(max_len=16, num_train=200, num_valid=16, num_test=8)
    c.train.update(batch_size=8, schedule="constant", num_steps=10, log_every=5, eval_every=5, checkpoint_every=5)
    c.sweep.axes = sweep_axes({"model.placement": ["pre"], "train.lr": [3e-3], "train.warmup_steps": [0]})
    folder = str(tmp_path / "wa")
    (name,) = [r["name"] for r in measure.run_grid(c, folder, progress=False)["runs"]]
    summary = os.path.join(folder, name, "summary.json")
    first = os.stat(summary).st_mtime_ns
    measure.run_grid(c, folder, progress=False)
    assert os.stat(summary).st_mtime_ns == first  # same training code: the finished run is reused
    io.write_json(os.path.join(folder, runs_code.MARKER), {"code": "0" * 16})
    status = measure.run_grid(c, folder, progress=False)
    assert os.stat(summary).st_mtime_ns != first and status["runs"][0]["status"] == "done"
    with open(os.path.join(folder, name, "metrics.jsonl")) as f:
        assert [json.loads(line)["step"] for line in f if '"train/loss"' in line] == [5, 10]  # trained once, anew
