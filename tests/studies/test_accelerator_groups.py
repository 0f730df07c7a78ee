"""accelerator_groups: group folders read and judged (S5 at 12 layers, X7 at 6-6), a group not run waits."""

import json
import os

import numpy as np
import pytest

from normjax.io import CorruptFileError, write_json
from normjax.report.claims import NOT_TESTABLE
from normjax.studies.accelerator_groups import measure, verdicts
from normjax.studies.accelerator_groups.groups import GROUPS

H = 4.0  # a synthetic unigram level: plateau level 3.8
DEVICE = {"backend": "gpu", "kind": "NVIDIA H100", "count": 1, "dtype": "float32", "param_dtype": "float32"}


def _run(placement, warmup, seed, nll, lr=10**-2.5, depth=12):
    return {
        "name": f"{placement}{lr}{warmup}{seed}",
        "group": "s5",
        "placement": placement,
        "depth": depth,
        "lr": lr,
        "warmup": warmup,
        "seed": seed,
        "optimizer": "adam",
        "diverged_step": 50 if nll is None else None,
        "final_valid_nll": nll,
        "valid_nll": [] if nll is None else [[0, 5.5], [1500, nll + 0.005], [3000, nll]],  # flat at the end
        "unigram_nll": H,
        "device": DEVICE,
    }


def _group(name, cells, **kw):
    """A group as measure.read_group gives it: {(placement, warmup): [final nll per seed (None: diverged)]}."""
    runs = [_run(p, w, s, nll) for (p, w), finals in cells.items() for s, nll in enumerate(finals)]
    entry = {"doc": GROUPS[name].doc, "read_by": GROUPS[name].read_by, "present": True, "tiny": False}
    return entry | {"expected": len(runs), "done": len(runs), "runs": runs, "num_steps": 3000} | kw


TRAINS, FAILS = [2.5, 2.6, 2.55, 2.5, 2.6], [3.95, 3.97, None, 3.96, 3.99]


def _s5(post: dict, pre: dict, **kw) -> dict:
    return verdicts.s5_long({"s5_post": _group("s5_post", post, **kw), "s5_pre": _group("s5_pre", pre)})


PRE = {("pre", w): TRAINS for w in (0, 250, 500, 1000)}


@pytest.mark.parametrize(
    "post, verdict, num_checks",
    [
        ({0: FAILS, 250: FAILS, 500: TRAINS, 1000: TRAINS}, "holds", 2),  # fails without, a warmup rescues
        ({0: FAILS, 250: FAILS, 500: FAILS, 1000: FAILS}, "partly holds", 2),  # no warmup rescues it
        ({0: TRAINS, 250: TRAINS, 500: TRAINS, 1000: TRAINS}, "does not hold", 1),  # trains without warmup
        ({0: FAILS, 250: FAILS, 500: FAILS, 1000: TRAINS[:4] + [3.99]}, "inconclusive at this scale", 2),  # mixed
    ],
)
def test_s5_at_12_layers_is_judged_by_the_cell_rules(post, verdict, num_checks):
    row = _s5({("post", w): finals for w, finals in post.items()}, PRE)
    assert row["verdict"] == verdict and len(row["checks"]) == num_checks
    assert "NVIDIA H100 (gpu, float32)" in row["measured"] and "3000 steps" in row["measured"]


def test_the_mixed_rescue_cell_is_inconclusive_not_a_failure():
    post = {("post", 0): FAILS, ("post", 250): FAILS, ("post", 500): FAILS, ("post", 1000): TRAINS[:4] + [3.99]}
    row = _s5(post, PRE)
    assert row["checks"] == ["supported", "inconclusive"] and "1000 mixed" in row["key"]


@pytest.mark.parametrize(
    "post_kw, why",
    [
        ({"present": False, "done": 0, "runs": []}, "s5_post has not run (0/"),
        ({"tiny": True}, "s5_post ran at its tiny size"),
        ({"done": 7, "expected": 20}, "s5_post has 7/20 runs done"),
    ],
)
def test_a_group_not_run_in_full_waits_and_adds_nothing(post_kw, why):
    post = {("post", w): TRAINS for w in (0, 250)}
    row = _s5(post, PRE, **post_kw)
    assert row["verdict"] == NOT_TESTABLE and why in row["measured"] and not row["checks"]


def test_x7_gives_one_row_per_lr_of_fig2():
    runs = []
    for lr in (5e-4, 1e-3):
        for (p, w), finals in {("post", 0): FAILS[:3], ("post", 400): TRAINS[:3], ("pre", 0): TRAINS[:3]}.items():
            runs += [_run(p, w, s, nll, lr=lr, depth=6) | {"group": "xiong_fig2"} for s, nll in enumerate(finals)]
    group = _group("xiong_fig2", {}) | {"runs": runs, "expected": len(runs), "done": len(runs)}
    group |= {"model": {"d_model": 128}, "data_task": "gettext"}
    rows = verdicts.x7_fig2({"xiong_fig2": group})
    assert [r["claim"] for r in rows] == ["X7", "X7"] and [r["verdict"] for r in rows] == ["holds", "holds"]
    assert rows[0]["measured"].startswith("lr 0.0005 on NVIDIA H100") and "6-6 layers" in rows[0]["measured"]


def test_an_absent_folder_waits_and_a_damaged_or_foreign_one_is_an_error(tmp_path):
    absent = measure.read_group("s5_post", str(tmp_path / "s5_post"))
    assert not absent["present"] and absent["expected"] == 20 and absent["runs"] == []
    folder = tmp_path / "s5_pre"
    folder.mkdir()
    (folder / measure.RECORD).write_text("{not json")
    with pytest.raises(CorruptFileError):
        measure.read_group("s5_pre", str(folder))
    write_json(str(folder / measure.RECORD), {"group": "s5_pre", "tiny": "yes"})
    with pytest.raises(CorruptFileError, match="not a group record"):
        measure.read_group("s5_pre", str(folder))
    write_json(str(folder / measure.RECORD), {"group": "s5_pre", "tiny": False})
    nothing_yet = measure.read_group("s5_pre", str(folder))  # recorded, nothing trained yet
    assert nothing_yet["present"] and nothing_yet["done"] == 0
    stranger = {"name": "grid=s5_pre,lr=1,seed=9", "status": "done", "summary": {}}
    (folder / "sweep.json").write_text(json.dumps({"runs": [stranger]}))
    with pytest.raises(CorruptFileError, match="not runs of group s5_pre"):
        measure.read_group("s5_pre", str(folder))
    assert os.path.exists(folder / "sweep.json")  # nothing deleted


def test_every_group_a_rule_reads_is_in_the_registry():
    assert set(verdicts.S5_GROUPS) | {verdicts.FIG2_GROUP} <= set(GROUPS)
    assert all(GROUPS[name].read_by for name in GROUPS)


def test_a_finished_answer_group_adds_the_24_layer_answer_table():
    runs = [
        _run(p, 0, 0, nll, lr=lr, depth=24) | {"group": "answer24_a", "init_valid_nll": 5.5}
        for p, finals in {"post": (2.5, 3.97, 3.98), "pre": (2.5, 2.4, 2.6)}.items()
        for lr, nll in zip((10**-3.5, 1e-3, 10**-2.5), finals, strict=True)
    ]
    group = _group("answer24_a", {}) | {"runs": runs, "expected": 6, "done": 6, "num_steps": 600}
    group |= {"model": {"d_model": 128}, "data_task": "bytes_lm", "b2": 0.95, "schedule": "s", "decay_start": 160}
    lines = verdicts.tables({"groups": {"answer24_a": group, "answer24_b": _group("answer24_b", {}, present=False)}})
    assert any(line.startswith("| answer24_a |") and "| 6/6 | NVIDIA H100" in line for line in lines)
    assert "The answer table at 24 layers (answer24_a):" in lines
    rows = [line for line in lines if line.startswith("| 24 |")]
    assert [r.split(" | ")[1] for r in rows] == ["post", "pre"]  # one row per placement; answer24_b waits


def test_the_report_refuses_results_built_before_a_group_arrived(tmp_path):
    from normjax.experiments import common
    from normjax.io import WorkdirError
    from normjax.studies.accelerator_groups.__main__ import EXPERIMENT
    from normjax.studies.report import load_results

    assert common.run_cli(EXPERIMENT, ["prog", f"--workdir={tmp_path}", "--progress=false"]) == 0
    assert set(load_results(str(tmp_path))) == {"accelerator_groups"}  # current: every group waits
    folder = tmp_path / "accelerator_groups" / "s5_post"
    folder.mkdir()
    write_json(str(folder / measure.RECORD), {"group": "s5_post", "tiny": False})
    (folder / "sweep.json").write_text(json.dumps({"runs": [{"name": "r", "status": "done", "summary": {}}]}))
    with pytest.raises(WorkdirError, match=r"s5_post: 0 -> 1 runs done\); rebuild it: python -m normjax"):
        load_results(str(tmp_path))


def _r5_group(name, profile):
    """A finished R5 group: 3 seeds of 24-layer runs whose per-layer gradient norms follow `profile(seed)`."""
    runs = []
    for seed in range(3):
        run = _run(name.split("_")[1], 160, seed, 2.5, lr=1e-3, depth=24) | {"group": name}
        run["layer_grad_norm"] = [[step, list(profile(seed))] for step in (0, 500, 1000)]
        run["train_nll"] = [[step, 3.0 - step / 1000] for step in (0, 500, 1000)]
        runs.append(run)
    group = _group(name, {}) | {"runs": runs, "expected": 3, "done": 3, "num_steps": 1000}
    return group | {"model": {"d_model": 128}, "schedule": "warmup_then_inverse_sqrt"}


def test_r5_at_24_layers_uses_trained_layers_rule_on_the_groups_gradients():
    steep = lambda seed: np.geomspace(1.0, 20.0 + seed, 24)  # ln-range about 3
    flat = lambda seed: np.geomspace(1.0, 2.0 + 0.1 * seed, 24)  # about 0.7
    row = verdicts.r5_long({"r5n1_pre": _r5_group("r5n1_pre", steep), "r5n1_mixln": _r5_group("r5n1_mixln", flat)})
    assert row["claim"] == "R5" and row["verdict"] == "holds" and row["checks"] == ["supported"]  # vs Pre-LN only
    assert row["measured"].startswith("on NVIDIA H100") and "24 layers, d 128, 1000 steps" in row["measured"]
    reverse = verdicts.r5_long({"r5n1_pre": _r5_group("r5n1_pre", flat), "r5n1_mixln": _r5_group("r5n1_mixln", steep)})
    assert reverse["verdict"] == "does not hold"
    waits = verdicts.r5_long({"r5n1_pre": _r5_group("r5n1_pre", flat)})
    assert waits["verdict"] == NOT_TESTABLE and "r5n1_mixln has not run" in waits["measured"]
