"""warmup_ablation's run folders are reused only by the training code that trained them (runs_code)."""

import json
import os

from normjax import io
from normjax.studies.warmup_ablation import measure, runs_code
from normjax.train.config_io import default_config, sweep_axes


def _fake_package(root):
    for rel in ("model.py", "train/steps.py", "studies/x/measure.py", "report/table.py", "plotting.py", "threshold.py"):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# {rel}\n")
    return root


def test_training_code_changes_with_training_files_only(tmp_path, monkeypatch):
    monkeypatch.setattr(runs_code, "_PACKAGE", str(_fake_package(tmp_path / "normjax")))
    before = runs_code.training_code()
    for rel in ("studies/x/measure.py", "report/table.py", "plotting.py", "threshold.py"):
        (tmp_path / "normjax" / rel).write_text("# an analysis change\n")
        assert runs_code.training_code() == before, rel
    for rel in ("model.py", "train/steps.py"):
        (tmp_path / "normjax" / rel).write_text("# a training change\n")
        changed = runs_code.training_code()
        assert changed != before, rel
        before = changed
    (tmp_path / "normjax" / "train" / "new.py").write_text("")  # a new training module counts too
    assert runs_code.training_code() != before


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
