"""answer: a tiny run through the sweep engine; the answer table derived from the numbers; the rescue rules."""

import re

import numpy as np

from normjax.report import VERDICTS
from normjax.report.rules import Check
from normjax.studies import runner
from normjax.studies.answer import config as answer_config
from normjax.studies.answer import figures, measure, verdicts
from normjax.studies.answer import table_verdicts as tables
from normjax.studies.judge import judge
from normjax.train.config_io import default_config
from normjax.train.outcomes import label

H = 4.0  # a synthetic unigram level: 'trained' below 0.95 H


def _tiny():
    c = answer_config._byte_lm(default_config(), d_model=16, d_ff=32, depth=1, num_steps=12, seq_len=16)
    c.model.num_heads = 2
    c.data.update(max_bytes=100_000, valid_batches=2)
    c.train.update(b2=0.5, log_every=4, eval_every=4, checkpoint_every=12)  # H = 2 steps
    c.sweep.workers = 1
    return answer_config.add_grids(
        c, placements=("post", "pre"), depths=(1,), lrs=[1e-2, 1e-1], dose_depth=1, dose_lr=1e-1,
        dose_horizons=(1,), intervention_lrs=[1e-1], intervention_seeds=1, layer_horizons=1, seed_count=2,
        sharpness_every=6, sharpness_dim=4, boundary_seeds=1,
    )  # fmt: skip


def test_answer_smoke(tmp_path):
    saved = runner.run_study("answer", str(tmp_path), _tiny(), measure.compute, figures.plot)
    results = saved["results"]
    groups = {r["group"] for r in results["runs"]}
    assert {"window", "dose", "gi_adam", "radam", "warmup_top", "warmup_bottom"} <= groups
    trained_curves = {(b["placement"], b["depth"]) for b in results["best_lr"]}
    assert {g for g in groups if g.startswith("quality")} == {f"quality_{p}_L{d}" for p, d in trained_curves}
    best = {(b["placement"], b["depth"]): b["lr"] for b in results["best_lr"]}
    first = {(r["placement"], r["depth"], r["lr"]): label(r, results["unigram_nll"]) == "trained"
             for r in results["runs"] if r["group"] == "window"}  # fmt: skip
    for r in (r for r in results["runs"] if r["group"].startswith("boundary")):
        other = {1e-2: 1e-1, 1e-1: 1e-2}[r["lr"]]  # its neighbour on the 2-lr curve trained or not, unlike it
        assert r["seed"] == 1 and r["lr"] != best.get((r["placement"], r["depth"]))
        assert first[(r["placement"], r["depth"], r["lr"])] != first[(r["placement"], r["depth"], other)]
    for r in results["runs"]:
        assert [s for s, _ in r["valid_nll"]][-1] == 12 and "label" not in r and "outcome" not in r
    arms = results["sharpness"]
    assert {(a["placement"], a["warmup"]) for a in arms} == {("post", 0), ("post", 2), ("pre", 0), ("pre", 2)}
    for a in arms:  # probes at 0, 6 and 12; P^-1 H undefined before the first update
        assert a["probes"]["step"] == [0, 6, 12] and a["probes"]["sharpness"][0] is None
    rows = judge("answer", results)
    assert [r["claim"] for r in rows] == ["A1", "A2", "A3", "A4", "A5"]
    assert all(r["verdict"] in VERDICTS for r in rows)
    _assert_every_number_cites_a_row(tables.answer_section(results), results)
    assert (tmp_path / "answer" / "lr_window.png").exists() and (tmp_path / "answer" / "sharpness.png").exists()


def test_boundary_lrs_are_both_sides_of_every_change():
    labels = {1e-3: "trained", 1e-2: "trained", 1e-1: "slow", 1.0: "trained", 10.0: "diverged"}
    assert measure.boundary_lrs(labels) == [1e-2, 1e-1, 1.0, 10.0]
    assert measure.boundary_lrs({1e-3: "trained", 1e-2: "trained"}) == []


def _curve(final):
    return [[0, 5.5], [6, final + 0.2], [12, final]]


def _run(placement, lr, seed, final, group="window", depth=2, warmup=0, optimizer="adam"):
    return dict(
        name=f"{group},{placement},{lr},{seed},{warmup},{optimizer}", group=group, placement=placement, depth=depth,
        lr=lr, warmup=warmup, optimizer=optimizer, seed=seed, final_valid_nll=final, diverged_step=None,
        unigram_nll=H, valid_nll=_curve(final), train_nll=_curve(final), wall_time_s=1.0,
    )  # fmt: skip


def _synthetic(post_nll, pre_nll):
    """Post-LN and Pre-LN at 2 layers: window over 3 lrs (Post-LN stalls at the highest), 3 seeds at lr 1e-2."""
    runs = []
    for placement, best in (("post", post_nll), ("pre", pre_nll)):
        runs += [_run(placement, 1e-3, 0, best + 0.3), _run(placement, 1e-2, 0, best)]
        runs.append(_run(placement, 1e-1, 0, H if placement == "post" else best + 0.1))
        runs += [_run(placement, 1e-2, s, best + 0.01 * s, group=f"quality_{placement}_L2") for s in (1, 2)]
    setup = dict(model={"d_model": 16}, num_steps=12, b1=0.9, b2=0.95, horizon=20, decay_start=40,
                 reference="pre", dose_depth=2, dose_lr=1e-1, sharpness_warmup=40)  # fmt: skip
    best = [{"placement": p, "depth": 2, "lr": 1e-2} for p in ("post", "pre")]
    return {"runs": runs, "sharpness": [], "unigram_nll": H, "best_lr": best, "setup": setup}


def _recommended(lines):
    return next(re.search(r"\*\*(\w+)\*\*", line).group(1) for line in lines if line.startswith("Recommended"))


def test_recommendation_is_derived_from_the_numbers():
    assert _recommended(tables.answer_section(_synthetic(post_nll=2.0, pre_nll=2.3))) == "post"
    assert _recommended(tables.answer_section(_synthetic(post_nll=2.5, pre_nll=2.3))) == "pre"


def _assert_every_number_cites_a_row(lines, results):
    ids = {f"r{i}" for i in range(len(results["runs"]))} | {f"s{i}" for i in range(len(results["sharpness"]))}
    table_rows = [line for line in lines if line.startswith("| ") and not line.startswith("| placement")]
    table_rows = [line for line in table_rows if not line.startswith(("| arm",))]
    assert table_rows
    for line in table_rows + [line for line in lines if line.startswith("Recommended")]:
        for cell in line.strip("|").split("|")[1:] if line.startswith("|") else [line]:
            cited = re.findall(r"\b[rs]\d+\b", cell)
            if re.search(r"\d\.\d|\d of \d|steps|trains|fails", cell):
                assert cited, f"a number without its row: {cell!r} in {line!r}"
            assert set(cited) <= ids, f"unknown row in {cell!r}"


def test_every_cell_of_the_answer_table_links_to_a_row():
    results = _synthetic(post_nll=2.0, pre_nll=2.3)
    _assert_every_number_cites_a_row(tables.answer_section(results), results)


def test_quality_rule_judges_the_paired_difference():
    rows = {r["claim"]: r for r in verdicts.verdicts(_synthetic(post_nll=2.0, pre_nll=2.3))}
    assert rows["A5"]["verdict"] == "holds"  # Post-LN 0.3 nats below at every seed
    rows = {r["claim"]: r for r in verdicts.verdicts(_synthetic(post_nll=2.5, pre_nll=2.3))}
    assert rows["A5"]["verdict"] == "does not hold"


def _labelled(labels):
    return [{"label": x} for x in labels]


def test_rescue_rule_is_three_valued():
    fail3, train3 = _labelled(["diverged"] * 3), _labelled(["trained"] * 3)
    assert verdicts.rescue_check(fail3, train3, True, 2 / 3)[0] is Check.SUPPORTED
    assert verdicts.rescue_check(fail3, _labelled(["stalled", "slow", "trained"]), True, 2 / 3)[0] is (
        Check.CONTRADICTED
    )
    assert verdicts.rescue_check(fail3, train3, False, 2 / 3)[0] is Check.CONTRADICTED  # bottom half predicted to fail
    assert verdicts.rescue_check(train3, train3, True, 2 / 3)[0] is Check.INCONCLUSIVE  # nothing to rescue
    assert verdicts.rescue_check(fail3[:2], train3[:2], True, 2 / 3)[0] is Check.INCONCLUSIVE  # 2 seeds


def _arm(placement, warmup, seed, sharp):
    steps = [0, 10, 20, 40]
    lrs = [0.0 if warmup and t == 0 else 1e-2 * (min(t / warmup, 1) if warmup else 1) for t in steps]
    return dict(name=f"{placement}{warmup}{seed}", placement=placement, warmup=warmup, seed=seed, diverged_step=None,
                probes=dict(step=steps, sharpness=[None] + [sharp] * 3, lr=lrs,
                            threshold=[38 / lr if lr else None for lr in lrs]))  # fmt: skip


def test_sharpness_rule_on_synthetic_arms():
    results = _synthetic(2.0, 2.3)
    results["sharpness"] = [_arm("post", 0, s, 5000.0 + s) for s in range(3)]
    results["sharpness"] += [_arm("post", 40, s, 5000.0) for s in range(3)]
    results["sharpness"] += [_arm("pre", 0, s, 500.0 * (1 + s)) for s in range(3)]
    row = next(r for r in verdicts.verdicts(results) if r["claim"] == "A3")
    assert row["verdict"] == "holds"  # same sharpness, but warmup's small lr_t raises the threshold
    results["sharpness"] = [a | {"warmup": 40} if a["placement"] == "post" and a["warmup"] == 0 else a
                            for a in results["sharpness"]]  # fmt: skip
    assert next(r for r in verdicts.verdicts(results) if r["claim"] == "A3")["verdict"] == "not testable at this scale"
    assert np.isfinite(H)
