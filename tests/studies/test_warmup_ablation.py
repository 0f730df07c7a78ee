"""warmup_ablation: the grid and its sub-grids run through the sweep engine; the S5 rule on synthetic results."""

import numpy as np
import pytest

import normjax
from normjax import train
from normjax.report import VERDICTS
from normjax.report.claims import CONSTRUCTION
from normjax.studies import runner
from normjax.studies.judge import judge
from normjax.studies.warmup_ablation import curves as lr_curves
from normjax.studies.warmup_ablation import figures
from normjax.studies.warmup_ablation import measure as warmup_ablation
from normjax.studies.warmup_ablation.verdicts import answer_table, critical_lrs, warmup_sensitivity
from normjax.train import job, outcomes, schedules
from normjax.train.config_io import default_config, sweep_axes

TINY = {"d_model": 16, "num_heads": 2, "d_ff": 32, "num_layers": 1}
H = 4.0  # a synthetic unigram level
STALL = outcomes.plateau_level(H)  # its plateau level, (1 - PLATEAU_BAND) H: 3.8


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
    for r in runs:  # no outcome label is written at run time: only the divergence event and the curves
        assert "outcome" not in r and r["diverged"] is False and [s for s, _ in r["train_nll"]] == [10, 20]
        assert np.isfinite(r["final_valid_nll"]) and r["unigram_nll"] == results["unigram_nll"]
        assert [s for s, _ in r["valid_nll"]] == [0, 10, 20]
    assert "stall_nll" not in results and results["target_nll"] < outcomes.plateau_level(results["unigram_nll"])
    assert (tmp_path / "wa" / "heatmap.png").exists() and (tmp_path / "wa" / "sweep.json").exists()
    assert (tmp_path / "wa" / "lr_sensitivity.png").exists() and results["data"]["task"] == "synthetic"
    assert all(r["init_valid_nll"] is not None and r["update_ratio"] for r in runs)
    rows = {r["claim"]: r for r in judge("warmup_ablation", results)}
    assert set(rows) == {"S5", "X7", "X8", "R7", "W1", "W2", "W3"}
    assert all(r["verdict"] in VERDICTS for r in rows.values())
    assert rows["S5"]["verdict"] == "not testable at this scale"  # one seed per cell
    assert rows["X7"]["verdict"] == "not testable at this scale"  # no IWSLT files on the synthetic task
    assert rows["R7"]["verdict"] == CONSTRUCTION  # the schedule formulas, independent of the run


def _curve(nll, falling=False):
    """A stored validation curve ending at `nll`: flat over its last third, or still falling by 0.2 nats."""
    return [] if nll is None else [[0, 5.5], [100, nll + (0.2 if falling else 0.005)], [200, nll]]


def _run(placement, lr, warmup, seed, nll, group="", depth=2, falling=False, unigram=H):
    run = dict(
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
        diverged_step=50 if nll is None else None,
        final_valid_nll=nll,
        final_valid_bleu=None,
        valid_nll=_curve(nll, falling),
        unigram_nll=unigram,
    )
    return run | {"outcome": outcomes.label(run)}  # as the rules see it (curves.relabel at report time)


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
    assert row["numbers"]["cells_rescued_by_warmup"] == [[2, 1e-2]]
    crit = row["numbers"]["critical_lr"]
    assert crit["post"]["2"] == {"lower": 1e-3, "upper": 1e-2, "state": "fails"} and crit["pre"]["2"]["upper"] is None
    assert "plateau level 3.80" in row["key"] and "(0.001, 0.01] (0.01: fails)" in row["measured"]


def test_s5_fails_when_both_placements_train_without_warmup():
    cells = {(p, 1e-2, w): TRAINED for p in ("post", "pre") for w in (0, 20)}
    assert warmup_sensitivity(_results(cells))["verdict"] == "does not hold"


def test_s5_a_noisy_cell_whose_mean_trains_does_not_count():
    # Pre-LN's seeds all trained and their mean (3.2) is below the plateau level, but the 95% interval of three
    # seeds this far apart reaches above it: the cell is mixed, so the effect is not shown
    noisy = [2.5, 3.55, 3.55]
    cells = {("post", 1e-2, 0): STUCK, ("pre", 1e-2, 0): noisy, ("post", 1e-2, 20): TRAINED}
    row = warmup_sensitivity(_results(cells))
    assert np.mean(noisy) < STALL and row["numbers"]["cells_showing_effect"] == []
    assert row["verdict"] == "inconclusive at this scale"  # the rescue is shown, the contrast with Pre-LN unresolved
    assert "Pre-LN mixed" in row["measured"]


def test_s5_partly_when_warmup_does_not_rescue_post_ln():
    cells = {("post", 1e-2, 0): STUCK, ("pre", 1e-2, 0): TRAINED, ("post", 1e-2, 20): STUCK}
    assert warmup_sensitivity(_results(cells))["verdict"] == "partly holds"


def test_critical_lr_ignores_under_training_at_small_lr():
    # lr 1e-4 stalls by under-training (no trained lr below it); 1e-2 is the first failure above a trained lr
    finals = {1e-4: [4.1] * 3, 1e-3: [2.5] * 3, 1e-2: [4.0] * 3, 1e-1: [None] * 3}
    runs = [_run("post", lr, 0, s, v, depth=6) for lr, vs in finals.items() for s, v in enumerate(vs)]
    assert critical_lrs(runs, STALL) == {"post": {6: {"lower": 1e-3, "upper": 1e-2, "state": "fails"}}}
    # a cell still falling at the plateau level (slow) is under-trained, not a failure: it bounds nothing
    slow = [_run("post", 1e-4, 0, s, 4.1, depth=6, falling=True) for s in range(3)]
    assert {r["outcome"] for r in slow} == {"slow"}
    assert critical_lrs(slow + runs[3:], STALL)["post"][6]["upper"] == 1e-2
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


def test_every_preset_runs_three_seeds_long_warmups_and_runs_three_times_the_longest():
    from normjax.studies.warmup_ablation import config as presets

    for preset in ("quick", "standard", "paper"):
        config = presets.get_config(preset)
        assert {"depth", "placements", "radam"} <= set(config.sweep.grids), preset
        warmups = list(config.sweep.axes["train.warmup_steps"])
        judged = [config.sweep.axes, config.sweep.grids["depth"]] + (
            [config.sweep.grids["translation"]] if "translation" in config.sweep.grids else []
        )  # the grids whose cells decide S5 and X7; the other arms are curves, on fewer seeds where stated
        for axes in judged:
            assert len(set(axes["train.seed"])) == 3, preset
        for axes in [config.sweep.axes, *config.sweep.grids.values()]:
            steps = max(axes.get("train.num_steps", [config.train.num_steps]))
            assert steps >= 3 * max(axes.get("train.warmup_steps", warmups)), preset
        assert config.train.schedule in schedules.FAIR_CONTROLS and config.train.decay_start == max(warmups)
        assert max(warmups) >= 2 * presets.horizon(config.train.b2), preset  # beyond Adam's second-moment memory
    standard = presets.get_config("standard")
    lrs = sorted(standard.sweep.axes["train.lr"])
    steps = [b / a for a, b in zip(lrs, lrs[1:], strict=False)]
    assert len(lrs) >= 5 and lrs[-1] / lrs[0] >= 10**1.5 and max(steps) <= 10**0.5 * (1 + 1e-9)
    assert standard.model.d_model >= 128 and standard.train.num_steps >= 600 and standard.data.task == "bytes_lm"
    assert sorted(standard.sweep.axes["train.warmup_steps"]) == [0, 8 * 20]  # beta2 0.95: H = 20
    assert list(standard.sweep.grids["short_warmup"]["train.warmup_steps"]) == [2 * 20]
    assert len(standard.sweep.grids["placements"]["model.placement"]) >= 4
    translation = standard.sweep.grids["translation"]
    assert list(translation["data.task"]) == ["gettext"] and list(translation["train.b2"]) == [0.98]
    assert max(translation["train.warmup_steps"]) >= 2 * 50 and list(translation["train.decay_start"]) == [
        max(translation["train.warmup_steps"])
    ]  # beta2 0.98: H = 50; the fair control within the arm


def test_every_compared_pair_of_arms_has_the_same_lr_after_the_longer_warmup():
    """The fair control: for each preset, the runs that differ only in warmup agree at every step >= W."""
    from normjax.studies.warmup_ablation import config as presets

    for preset in ("quick", "standard"):
        config = presets.get_config(preset)
        by_cell: dict = {}
        for r in train.expand(config, 1):
            t = r.run.train
            key = (r.group, r.run.model["placement"], r.run.model["num_layers"], t.lr, t.seed, t.optimizer)
            by_cell.setdefault(key, []).append(r)
        compared = [runs for runs in by_cell.values() if len(runs) > 1]
        assert compared, preset
        for runs in compared:
            arms = []
            for r in runs:
                cfg = normjax.ModelConfig(**(r.run.model | {"vocab_size": 256, "max_len": r.run.data.seq_len}))
                arms.append(job.hparams(r.run, cfg))
            assert schedules.control_mismatch(config.train.schedule, arms, config.train.num_steps) is None


def test_lr_sensitivity_of_synthetic_curves():
    """Wortsman et al.'s metric: the mean gap to the curve's best, failed runs counted at the init loss."""
    init = 5.5
    assert lr_curves.lr_sensitivity([2.0, 2.0, 2.0], init) == 0.0  # flat: insensitive
    assert lr_curves.lr_sensitivity([2.0, 3.0, 4.0], init) == pytest.approx(1.0)
    # one lr trains, the others diverge (None) or end above the init loss: they count at the init loss
    assert lr_curves.lr_sensitivity([None, 2.0, 9.0], init) == pytest.approx((2 * init + 2.0) / 3 - 2.0)
    assert lr_curves.lr_sensitivity([float("nan"), 2.5], init) == pytest.approx((init + 2.5) / 2 - 2.5)
    wide = lr_curves.lr_sensitivity([2.0, 2.1, 2.2, 2.4, 2.9], init)
    narrow = lr_curves.lr_sensitivity([2.0, 2.1, 5.0, None, None], init)
    assert wide < narrow  # a curve that trains over more of the range is less sensitive


def test_curves_group_seeds_and_the_answer_table_reads_them():
    runs = []
    for seed in range(3):
        for lr, post0, pre0, post_w in ((1e-3, 2.5, 2.5, 2.5), (1e-2, None, 2.4, 2.45)):
            for placement, warmup, nll in (("post", 0, post0), ("pre", 0, pre0), ("post", 20, post_w)):
                run = _run(placement, lr, warmup, seed, nll)
                runs.append(run | {"init_valid_nll": 5.5, "steps_to_target": 50 if nll else None})
    results = {"runs": runs, "unigram_nll": H, "stall_nll": STALL, "model": dict(TINY), "data_task": "bytes_lm"}
    results |= {"num_steps": 60, "b2": 0.95, "schedule": "warmup_then_inverse_sqrt", "decay_start": 20}
    curves = lr_curves.sensitivity_curves(results)
    assert len(curves) == 9 and all(len(c["lrs"]) == 2 for c in curves)
    post0 = [c for c in curves if (c["placement"], c["warmup"]) == ("post", 0)]
    assert all(c["sensitivity"] == pytest.approx((5.5 + 2.5) / 2 - 2.5) for c in post0)
    table = "\n".join(answer_table(results))
    assert (
        "| 2 | post | 0.001 | 20 | 0.001, 0.01 |" in table and "| 2 | pre | 0.001, 0.01 | no warmup arm | - |" in table
    )
    assert figures.failure_pair(results)[0]["lr"] == 1e-2  # Post-LN fails there and trains with warmup
    # a warmup arm that trains at fewer lrs: no warmup is the best, and its numbers fill the warmup columns too
    worse = [_run("pre", lr, 20, s, nll) | {"init_valid_nll": 5.5, "steps_to_target": 50 if nll else None}
             for s in range(3) for lr, nll in ((1e-3, 2.5), (1e-2, None))]  # fmt: skip
    table = "\n".join(answer_table(results | {"runs": runs + worse}))
    row = next(line for line in table.splitlines() if line.startswith("| 2 | pre |"))
    assert row.startswith("| 2 | pre | 0.001, 0.01 | 0 | 0.001, 0.01 |") and "/ - |" not in row and "50" in row


def test_the_answer_table_marks_one_seed_arms_as_not_judged_and_prefers_judged_warmups():
    """A 1-seed curve (the placement arms) lists the lrs where its run ended ok, marked 'not judged', instead of
    'none' (which would read as: fails at every lr); a 1-seed warmup arm is never the 'best warmup' over a
    judged one."""
    runs = []
    for seed in range(3):
        for lr, post0, post_w in ((1e-3, 2.5, 2.5), (1e-2, None, 2.45)):
            runs += [_run("post", lr, 0, seed, post0), _run("post", lr, 20, seed, post_w)]
    for lr, nll in ((1e-3, 2.5), (1e-2, 2.4), (1e-1, None)):
        runs += [_run("sandwich", lr, 0, 0, nll, group="placements"), _run("post", lr, 5, 0, 2.4, group="short")]
    runs = [r | {"init_valid_nll": 5.5, "steps_to_target": None} for r in runs]
    results = {"runs": runs, "unigram_nll": H, "stall_nll": STALL, "model": dict(TINY), "data_task": "bytes_lm"}
    results |= {"num_steps": 60, "b2": 0.95, "schedule": "warmup_then_inverse_sqrt", "decay_start": 20}
    table = "\n".join(answer_table(results))
    assert "| 2 | sandwich | 0.001, 0.01 (1 seed: every run trained, not judged) | no warmup arm | - |" in table
    assert "| 2 | post | 0.001 | 20 | 0.001, 0.01 |" in table  # not warmup 5, though it is ok at 3 lrs
    runs += [_run("post", 1e-4, 0, 0, 2.6) | {"init_valid_nll": 5.5, "steps_to_target": None}]  # a side seed
    table = "\n".join(answer_table(results | {"runs": runs}))
    assert "| 2 | post | 0.001; 0.0001 (1 seed: every run trained, not judged) | 20 |" in table
    failing = [_run("rezero", lr, 0, 0, None, group="placements") for lr in (1e-3, 1e-2)]  # one seed, no run trains
    failing = [r | {"init_valid_nll": 5.5, "steps_to_target": None} for r in failing]
    table = "\n".join(answer_table(results | {"runs": runs + failing}))
    assert "| 2 | rezero | no run trained (1 seed, not judged) | no warmup arm |" in table


def test_a_mitigation_arm_is_its_own_row_and_depth_lr_extends_the_depth_curves():
    """qk_norm's Pre-LN runs never pool with the plain Pre-LN cells; depth_lr's lrs join the depth grid's curve."""
    runs = []
    for seed in range(3):
        for lr, plain, qk in ((1e-3, 2.5, 2.5), (1e-2, None, 2.4)):
            runs.append(_run("pre", lr, 0, seed, plain) | {"init_valid_nll": 5.5, "steps_to_target": None})
            runs.append(_run("pre", lr, 0, seed, qk, group="qk_norm") | {"init_valid_nll": 5.5, "steps_to_target": 9})
        for lr, group in ((1e-3, "depth"), (1e-2, "depth_lr")):
            runs.append(_run("pre", lr, 0, seed, 2.6, group=group, depth=4) | {"init_valid_nll": 5.5})
    results = {"runs": runs, "unigram_nll": H, "stall_nll": STALL, "model": dict(TINY), "data_task": "bytes_lm"}
    results |= {"num_steps": 60, "b2": 0.95, "schedule": "warmup_then_inverse_sqrt", "decay_start": 0}
    table = "\n".join(answer_table(results))
    assert (
        "| 2 | pre | 0.001 | no warmup arm |" in table and "| 2 | pre +qk_norm | 0.001, 0.01 | no warmup arm |" in table
    )
    deep = [c for c in lr_curves.sensitivity_curves(results) if c["depth"] == 4]
    assert len(deep) == 3 and all(c["group"] == "depth" and c["lrs"] == [1e-3, 1e-2] for c in deep)
    labels = {figures._curve_label(c) for c in lr_curves.sensitivity_curves(results)}
    assert labels == {"pre, no warmup", "pre, no warmup +qk_norm"}


def _translation(cells, unigram=6.0, falling=False):
    """{(placement, warmup): [final nll per seed]} -> translation-arm rows (their own unigram level: plateau 5.7)
    beside one LM run at another unigram level, which the arm's rule and the LM analyses must not mix."""
    runs = []
    for (placement, warmup), finals in cells.items():
        for seed, nll in enumerate(finals):
            row = _run(placement, 1e-3, warmup, seed, nll, group="translation", falling=falling, unigram=unigram)
            runs.append(row | {"final_test_bleu": 0.0 if row["outcome"] != "trained" else 12.0})
    lm = _run("post", 1e-3, 0, 0, 2.5)
    results = {"runs": runs + [lm], "unigram_nll": H, "model": dict(TINY), "data_task": "bytes_lm"}
    return lr_curves.relabel(results)


@pytest.mark.parametrize(
    "post0, post_w, pre0, falling, verdict",
    [
        ([6.0, 6.1, None], [3.0, 3.1, 3.2], [3.0, 3.2, 3.1], False, "holds"),
        ([6.0, 6.1, 6.2], [6.0, 6.1, 6.2], [3.0, 3.2, 3.1], False, "partly holds"),
        ([6.0, 6.1, 6.2], [6.0, 6.1, 6.2], [6.0, 6.1, 6.2], True, "inconclusive at this scale"),  # all still falling
        (
            [6.0, 6.1, 6.2],
            [6.0, 6.1, 6.2],
            [6.0, 6.1, 6.2],
            False,
            "partly holds",
        ),  # all stalled: only Post-LN's failure
        ([3.0, 3.1, 3.2], [3.0, 3.1, 3.2], [3.0, 3.1, 3.2], False, "partly holds"),  # Post-LN trains without warmup
    ],
)
def test_x7_on_the_translation_arm_uses_its_own_plateau_level(post0, post_w, pre0, falling, verdict):
    from normjax.studies.warmup_ablation.translation_verdicts import translation_verdict

    cells = {("post", 0): post0, ("post", 200): post_w, ("pre", 0): pre0, ("pre", 200): pre0}
    results = _translation(cells, falling=falling)
    rows = lr_curves.translation_runs(results)
    assert len(rows) == 12 and len(lr_curves.lm_runs(results)) == 1  # the LM analyses leave the arm out
    row = translation_verdict(results, rows)
    assert row["verdict"] == verdict and len(row["checks"]) == 3  # through the one combinator
    assert "plateau level 5.7" in row["reason"]  # the arm's level (its BPE tokens), not the byte LM's 3.8


def test_low_lr_runs_close_the_critical_lr_bracket_count_for_s5_and_draw_no_curve():
    """Post-LN fails at the depth curve's lowest lr: the low_lr grid's trained cell below it gives the bracket a
    lower end, its warmup cell counts as a rescue, and its runs join no lr curve (every depth's spans one range)."""
    cells = {
        ("post", 1e-3, 0, "depth"): STUCK, ("pre", 1e-3, 0, "depth"): TRAINED, ("post", 1e-3, 20, "depth"): TRAINED,
        ("post", 1e-4, 0, "low_lr"): TRAINED, ("pre", 1e-4, 0, "low_lr"): TRAINED,
        ("post", 1e-4, 20, "low_lr"): TRAINED, ("post", 1e-2, 0, "depth_lr"): STUCK,
    }  # fmt: skip
    runs = [
        _run(p, lr, w, s, nll, group=g, depth=4) | {"init_valid_nll": 5.5}
        for (p, lr, w, g), finals in cells.items()
        for s, nll in enumerate(finals)
    ]
    runs += [_run(p, 1e-3, w, s, 2.5) for p in ("post", "pre") for w in (0, 20) for s in range(3)]  # the main grid
    results = {"runs": runs, "unigram_nll": H, "stall_nll": STALL, "model": dict(TINY), "data_task": "synthetic"}
    row = warmup_sensitivity(results)
    assert row["numbers"]["critical_lr"]["post"]["4"] == {"lower": 1e-4, "upper": 1e-3, "state": "fails"}
    assert row["numbers"]["cells_showing_effect"] == [[4, 1e-3]]
    assert [4, 1e-3] in row["numbers"]["cells_rescued_by_warmup"]
    deep = [c for c in lr_curves.sensitivity_curves(results) if c["depth"] == 4 and c["warmup"] == 0]
    assert deep and all(c["lrs"] == [1e-3, 1e-2] for c in deep if c["placement"] == "post")
