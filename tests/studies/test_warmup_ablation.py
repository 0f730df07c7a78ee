"""warmup_ablation: the grid and its sub-grids run through the sweep engine; the S5 rule on synthetic results."""

import numpy as np

from normjax.report import VERDICTS
from normjax.report.claims import CONSTRUCTION
from normjax.studies import runner
from normjax.studies.judge import judge
from normjax.studies.warmup_ablation import measure as warmup_ablation
from normjax.studies.warmup_ablation.verdicts import critical_lrs, warmup_sensitivity
from normjax.train.config_io import default_config, sweep_axes

TINY = {"d_model": 16, "num_heads": 2, "d_ff": 32, "num_layers": 1}
H, STALL = 4.0, 3.6  # a synthetic unigram level and its stall level (0.9 H)


def _tiny_grid():
    c = default_config()
    c.model.update(TINY)
    c.data.update(max_len=16, num_train=400, num_valid=32, num_test=8)
    c.train.update(
        batch_size=8,
        schedule="constant",
        num_steps=20,
        log_every=10,
        eval_every=10,
        checkpoint_every=10,
        bleu_examples=8,
        divergence_check_every=5,
    )
    c.sweep.axes = sweep_axes({"model.placement": ["post", "pre"], "train.lr": [3e-3], "train.warmup_steps": [0, 10]})
    c.sweep.grids = {"sgd": sweep_axes({"train.optimizer": ["sgd"], "train.lr": [0.1], "train.warmup_steps": [0]})}
    return c


def test_warmup_ablation_smoke(tmp_path):
    folder = str(tmp_path / "wa")
    saved = runner.run_study(
        "warmup_ablation", "", _tiny_grid(), warmup_ablation.compute, warmup_ablation.plot, folder=folder
    )
    results = saved["results"]
    runs = results["runs"]
    main = {(r["placement"], r["warmup"]) for r in runs if not r["group"]}
    assert main == {("post", 0), ("post", 10), ("pre", 0), ("pre", 10)}
    assert [(r["group"], r["optimizer"], r["lr"]) for r in runs if r["group"]] == [("sgd", "sgd", 0.1)]
    for r in runs:
        assert r["outcome"] in ("ok", "stalled") and [s for s, _ in r["train_nll"]] == [10, 20]
        assert np.isfinite(r["final_valid_nll"]) and r["unigram_nll"] == results["unigram_nll"]
        assert r["outcome"] == ("stalled" if r["final_valid_nll"] >= results["stall_nll"] else "ok")
    assert results["stall_nll"] < results["unigram_nll"] and results["target_nll"] < results["stall_nll"]
    assert (tmp_path / "wa" / "heatmap.png").exists() and (tmp_path / "wa" / "sweep.json").exists()
    rows = {r["claim"]: r for r in judge("warmup_ablation", results)}
    assert set(rows) == {"S5", "X7", "X8", "R7"}
    assert all(r["verdict"] in VERDICTS for r in rows.values())
    assert rows["S5"]["verdict"] == "not testable at this scale"  # one seed per cell
    assert rows["X7"]["verdict"] == "not testable at this scale"  # no IWSLT files on the synthetic task
    assert rows["R7"]["verdict"] == CONSTRUCTION  # the schedule formulas, independent of the run


def _run(placement, lr, warmup, seed, nll, group="", depth=2, outcome=None):
    outcome = outcome or ("diverged" if nll is None else "stalled" if nll >= STALL else "ok")
    return dict(
        name=f"{group}{placement}{lr}{warmup}{seed}{depth}",
        group=group,
        placement=placement,
        depth=depth,
        lr=lr,
        warmup=warmup,
        seed=seed,
        schedule="inverse_sqrt",
        optimizer="adam",
        b2=0.98,
        outcome=outcome,
        final_valid_nll=nll,
        final_valid_bleu=None,
    )


def _results(cells):
    """{(placement, lr, warmup): [final nll per seed]} -> a results dict (None: diverged)."""
    runs = [_run(p, lr, w, s, nll) for (p, lr, w), finals in cells.items() for s, nll in enumerate(finals)]
    return {"runs": runs, "unigram_nll": H, "stall_nll": STALL, "model": dict(TINY), "data_task": "synthetic"}


TRAINED = [2.5, 2.6, 2.55]
STUCK = [4.0, 3.95, None]


def test_s5_holds_when_post_ln_fails_on_every_seed_and_warmup_rescues_it():
    cells = {
        ("post", 1e-3, 0): TRAINED,
        ("pre", 1e-3, 0): TRAINED,
        ("post", 1e-3, 20): TRAINED,
        ("post", 1e-2, 0): STUCK,
        ("pre", 1e-2, 0): TRAINED,
        ("post", 1e-2, 20): TRAINED,
    }
    row = warmup_sensitivity(_results(cells))
    assert row["verdict"] == "holds" and row["numbers"]["cells_showing_effect"] == [[2, 1e-2]]
    assert row["numbers"]["lrs_rescued_by_warmup"] == [1e-2]
    crit = row["numbers"]["critical_lr"]
    assert crit["post"]["2"] == {"lower": 1e-3, "upper": 1e-2, "state": "fails"} and crit["pre"]["2"]["upper"] is None
    assert "stall 3.60" in row["key"] and "(0.001, 0.01] (0.01: fails)" in row["measured"]


def test_s5_fails_when_both_placements_train_without_warmup():
    cells = {(p, 1e-2, w): TRAINED for p in ("post", "pre") for w in (0, 20)}
    assert warmup_sensitivity(_results(cells))["verdict"] == "does not hold"


def test_s5_a_noisy_cell_whose_mean_trains_does_not_count():
    # Pre-LN's seeds all end "ok" and their mean (3.2) is below the stall level, but the 95% interval of three
    # seeds this far apart reaches above it: the cell is mixed, so the effect is not shown
    noisy = [2.5, 3.55, 3.55]
    cells = {("post", 1e-2, 0): STUCK, ("pre", 1e-2, 0): noisy, ("post", 1e-2, 20): TRAINED}
    row = warmup_sensitivity(_results(cells))
    assert np.mean(noisy) < STALL and row["verdict"] == "does not hold"
    assert "Pre-LN mixed" in row["measured"]


def test_s5_partly_when_warmup_does_not_rescue_post_ln():
    cells = {("post", 1e-2, 0): STUCK, ("pre", 1e-2, 0): TRAINED, ("post", 1e-2, 20): STUCK}
    assert warmup_sensitivity(_results(cells))["verdict"] == "partly holds"


def test_critical_lr_ignores_under_training_at_small_lr():
    # lr 1e-4 stalls by under-training (no trained lr below it); 1e-2 is the first failure above a trained lr
    finals = {1e-4: [4.1] * 3, 1e-3: [2.5] * 3, 1e-2: [4.0] * 3, 1e-1: [None] * 3}
    runs = [_run("post", lr, 0, s, v, depth=6) for lr, vs in finals.items() for s, v in enumerate(vs)]
    assert critical_lrs(runs, STALL) == {"post": {6: {"lower": 1e-3, "upper": 1e-2, "state": "fails"}}}
    # with no trained lr below, the first failing lr is an upper bound only
    low = [r for r in runs if r["lr"] >= 1e-2]
    assert critical_lrs(low, STALL) == {"post": {6: {"lower": None, "upper": 1e-2, "state": "fails"}}}


def test_a_seed_override_shifts_every_seed_axis_and_a_swept_key_is_replaced_in_every_grid():
    from normjax.experiments import common
    from normjax.studies.warmup_ablation import __main__ as cli
    from normjax.studies.warmup_ablation import config as presets

    config = presets.get_config("quick")
    config.train.seed, config.train.lr = 5, 0.02
    args = common.Args(config=config, overrides=("train.seed", "train.lr"), workdir="", progress=False)
    out = cli.grid(args)
    assert list(out.sweep.axes["train.seed"]) == [5, 6, 7] and list(out.sweep.axes["train.lr"]) == [0.02]
    for name, axes in out.sweep.grids.items():
        assert list(axes["train.seed"]) == [5, 6, 7], name
        assert list(axes["train.lr"]) == [0.02], name


def test_every_preset_runs_three_seeds_and_ten_times_its_longest_warmup():
    from normjax.studies.warmup_ablation import config as presets

    for preset in ("quick", "standard", "paper"):
        config = presets.get_config(preset)
        grids = [config.sweep.axes, *config.sweep.grids.values()]
        assert {"constant", "depth_lr", "adam999", "radam", "sgd"} <= set(config.sweep.grids), preset
        for axes in grids:
            assert len(set(axes["train.seed"])) == 3, preset
            assert config.train.num_steps >= 10 * max(axes.get("train.warmup_steps", [config.train.warmup_steps]))
        assert config.train.schedule == "inverse_sqrt" and config.sweep.grids["constant"]["train.schedule"] == [
            "constant"
        ]
