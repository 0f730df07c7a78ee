"""deep_training: the tiny end-to-end run (schema, seeds, probes) and its rules on synthetic per-seed results."""

import copy

import ml_collections
import numpy as np
import pytest

from normjax.report import CLAIMS, VERDICTS
from normjax.report.claims import CONSTRUCTION, INCONCLUSIVE
from normjax.report.rules import claim_verdict
from normjax.studies import runner
from normjax.studies.deep_training import STUDY, runs
from normjax.studies.deep_training import measure as deep_training
from normjax.studies.deep_training.verdicts import decoder_deepnorm
from normjax.studies.judge import judge

H = 3.3  # the synthetic unigram entropy


def _tiny():
    c = ml_collections.ConfigDict()
    c.runs, c.depths = ("post", "deepnorm", "resi_dual", "post+no_bias"), (2, 3)
    c.side_runs, c.side_depths = (), ()
    c.d_model, c.num_heads, c.d_ff = 16, 2, 32
    c.seq_len, c.batch_size, c.max_bytes, c.data_seed = 16, 4, 100_000, 0
    c.lr, c.num_steps, c.update_lr = 3e-3, 4, 1e-4
    c.optimizer, c.b1, c.b2, c.eps = "adam", 0.9, 0.98, 1e-9
    c.early_steps, c.probe_every, c.final_window = 2, 2, 2
    c.divergence_factor, c.divergence_patience, c.divergence_check_every = 1.5, 10, 10
    c.s7_depths, c.s7_lrs, c.s7_warmup, c.s7_steps, c.s7_schedule = (2, 3), (3e-3,), 1, 4, "constant"
    c.seed, c.num_seeds, c.d2_num_seeds, c.d2_widths = 0, 3, 4, (24,)
    return c


def test_deep_training_smoke(tmp_path):
    saved = runner.run_study("deep_training", str(tmp_path), _tiny(), deep_training.compute, STUDY.plot)
    results = saved["results"]
    for figure in ("depth_sweep", "instability", "stream_growth", "deepnorm_depth"):
        assert (tmp_path / "deep_training" / f"{figure}.png").exists()
    assert results["seeds"] == [0, 1, 2]
    for run in ("post", "deepnorm", "resi_dual", "post+no_bias"):
        recs = results["runs"][run]["2"]
        assert [rec["seed"] for rec in recs] == [0, 1, 2]
        assert len(results["summary"][run]["2"]["per_seed"]) == 3
        for rec in recs:
            assert rec["probes"]["step"] == [0, 1, 2, 4]
            assert len(rec["loss"]) == 4 and np.array(rec["probes"]["layer_grad_norm"]).shape == (4, 2)
            assert np.array(rec["probes"]["stream_ms"]).shape == (4, 3)  # x_0 .. x_L at every probe
            # F(x, theta_0) - F(x, theta_0) = 0 exactly; every Adam update moves the output
            for update in (rec["probes"]["update"], rec["small_lr_update"]):
                assert update[0] == 0.0 and min(update[1:]) > 0
    # seeds differ: another init gives another first loss
    assert len({rec["loss"][0] for rec in results["runs"]["post"]["2"]}) == 3
    # DeepNorm's alpha read back from the stream is the paper's (2M)^(1/4)
    alpha = results["runs"]["deepnorm"]["2"][0]["init"]["deepnorm"]["alpha"]
    np.testing.assert_allclose(alpha, decoder_deepnorm(2)[0], rtol=1e-4)
    # 4 steps cannot train Post-LN below the unigram level: S7 finds no lr and says so
    assert results["s7"]["lr"] is None and list(results["s7"]["candidates"]) == ["0.003"]
    rows = {row["claim"]: row for row in judge("deep_training", results)}
    assert {"D1", "D2", "D3", "S7"} <= set(rows) <= set(CLAIMS)
    assert all(row["verdict"] in VERDICTS for row in rows.values())
    assert rows["D1"]["verdict"] == CONSTRUCTION
    assert rows["S7"]["verdict"] == "not testable at this scale"
    # D2 over 4 seeds: the main runs' 3, then one early-update-only run per depth, for post and deepnorm only
    d2 = results["d2"]
    assert d2["seeds"] == [0, 1, 2, 3] and set(d2["early_update"]) == {"post", "deepnorm"}
    for run in ("post", "deepnorm"):
        for depth in ("2", "3"):
            main = [s["early_update"] for s in results["summary"][run][depth]["per_seed"]]
            assert d2["early_update"][run][depth][:3] == main and len(d2["early_update"][run][depth]) == 4
        assert len(results["update_fits"][run]) == 4
        wide = d2["widths"]["24"][run]  # D2 at d 24: every D2 seed an early-update-only run
        assert set(wide) == {"2", "3"} and all(len(u) == 4 and min(u) > 0 for u in wide.values())
        assert wide["2"] != d2["early_update"][run]["2"] and len(d2["fits"]["24"][run]) == 4
    d2_rows = [row for row in judge("deep_training", results) if row["claim"] == "D2"]
    assert [row["key"].split(":")[0] for row in d2_rows] == ["d 16", "d 24 (early-update-only runs)"]


def _seed(final, update=1.0, end=(1.0, 8.0), init=(1.0, 2.0), first=2.0):
    """One seed's summary: final loss (None: diverged), D2's update, ||x_l||^2/d after training and at init."""
    return {
        "early_update": update,
        "first_update_relative": first,
        "final_loss": final,
        "diverged_step": None if final is not None else 7,
        "ln_rms_init": 1.0,
        "ln_rms_peak": 6.0,
        "grad_bottom_init": 1.0,
        "grad_bottom_end": 1e-4,
        "grad_top_end": 1e-1,
        "stream_ms_init": list(init),
        "stream_ms_end": list(end),
    }


def _entry(finals, **kw):
    per_seed = [_seed(f, **{k: v[i] for k, v in kw.items()}) for i, f in enumerate(finals)]
    steps = [s["diverged_step"] for s in per_seed if s["diverged_step"] is not None]
    return {"per_seed": per_seed, "diverged_step": min(steps) if steps else None}


def _record(seed):
    grads = [[1.0, 1.0], [0.1, 1.0], [1e-4, 1.0]]
    return {
        "seed": seed,
        "init": {},
        "probes": {"step": [0, 1, 10], "ln_input_rms": [1.0, 6.0, 6.0], "layer_grad_norm": grads},
    }


def _results(s7_deep=(2.01, 2.0, 1.99), tfixup=(2.0, 2.0, 2.0), pre_end=((1, 8), (1, 8.4), (1, 7.6))):
    """A complete synthetic results dict whose every claim holds; arguments make one claim fail or wobble."""
    pre6 = _entry((2.0, 2.0, 2.0), end=[(1.0, 3.0)] * 3)
    pre18 = _entry((2.0, 2.0, 2.0), end=pre_end, init=[(1.0, 2.0)] * 3)
    summary = {
        "post": {"6": _entry((2.1, 2.1, 2.1), update=(1, 1, 1)), "18": _entry((2.4, 2.4, 2.4), update=(4, 4.2, 3.9))},
        "deepnorm": {
            "6": _entry((2.1, 2.1, 2.1), update=(0.1,) * 3),
            "18": _entry((2.0,) * 3, update=(0.1,) * 3, first=(0.3, 0.2, 0.25)),
        },
        "pre": {"6": pre6, "18": pre18},
        "sandwich": {"18": _entry((2.0,) * 3, end=[(1.0, 2.2)] * 3, init=[(1.0, 2.0)] * 3)},
        "tfixup": {"6": _entry(tfixup)},
    }
    fit = lambda u6, u18: {"exponent": float(np.log(u18 / u6) / np.log(3))}
    s7 = {
        "schedule": "constant",
        "warmup": 30,
        "num_steps": 200,
        "lr": 0.01,
        "candidates": {"0.01": [2.0, 2.0, 2.0]},
        "summary": {
            "post": {"6": _entry((2.0, 2.02, 1.98)), "18": _entry((2.6, 2.7, 2.65))},
            "deepnorm": {"6": _entry((2.0,) * 3), "18": _entry(s7_deep)},
        },
        "loss": {},
    }
    return {
        "setup": {"lr": 3e-3, "num_steps": 60, "update_lr": 1e-4, "early_steps": 10},
        "seeds": [0, 1, 2],
        "runs": {"post": {"6": [_record(s) for s in range(3)], "18": [_record(s) for s in range(3)]}},
        "summary": summary,
        "update_fits": {
            "post": [fit(1, 4), fit(1, 4.2), fit(1, 3.9)],
            "deepnorm": [fit(0.1, 0.1), fit(0.1, 0.1), fit(0.1, 0.1)],
        },
        "unigram_nll": H,
        "s7": s7,
    }


def _rows(results):
    return {row["claim"]: row for row in judge("deep_training", results)}


def test_rules_clean_pass():
    rows = _rows(_with_d2(_results(), [1.26 + 0.01 * i for i in range(9)], [0.01 * (i - 4) for i in range(9)]))
    for claim in ("D2", "D3", "S7", "S4", "R4", "R3"):
        assert rows[claim]["verdict"] == "holds", (claim, rows[claim]["reason"])
        assert f"({9 if claim == 'D2' else 3} seeds" in rows[claim]["key"]


def test_s7_fails_when_deepnorm_fails_too():
    rows = _rows(_results(s7_deep=(2.8, None, 3.2)))  # stalls or diverges where Post-LN fails
    assert rows["S7"]["verdict"] == "does not hold"


def test_s7_noisy_deepnorm_is_inconclusive():
    # mean ratio to Post-LN shallow 1.03 < 1.05, but the seeds spread the interval across 1.05
    rows = _rows(_results(s7_deep=(1.9, 2.06, 2.22)))
    assert rows["S7"]["verdict"] == INCONCLUSIVE


def test_s7_not_testable_when_post_ln_does_not_fail_with_depth():
    results = _results()
    results["s7"]["summary"]["post"]["18"] = _entry((2.0, 2.01, 1.99))
    assert _rows(results)["S7"]["verdict"] == "not testable at this scale"


@pytest.mark.parametrize(
    "tfixup, verdict",
    [
        ((2.0, 2.0, 2.0), "holds"),
        ((1.9, 2.4, 2.05), INCONCLUSIVE),  # the ranking against Pre-LN flips between seeds
        ((2.9, 3.0, None), "does not hold"),  # clearly worse (a diverged seed counts at H(p))
    ],
)
def test_r3_judged_on_the_interval(tfixup, verdict):
    assert _rows(_results(tfixup=tfixup))["R3"]["verdict"] == verdict


def test_stream_rules_fail_and_noise():
    flat = _rows(_results(pre_end=((1, 3.0), (1, 3.1), (1, 2.9))))  # the last stream no larger at 18 than at 6
    assert flat["S4"]["verdict"] != "holds"
    noisy = _rows(_results(pre_end=((1, 1.5), (1, 6.0), (1, 2.4))))  # growth ratio mean > 1, interval straddles
    assert noisy["R4"]["verdict"] == INCONCLUSIVE


def test_noisy_d2_slope_does_not_hold():
    results = copy.deepcopy(_results())
    results["update_fits"]["post"] = [{"exponent": e} for e in (0.05, 0.9, 0.1)]  # mean 0.35, interval spans 0.2
    assert _rows(results)["D2"]["verdict"] != "holds"


def test_two_seeds_are_not_a_verdict():
    results = _results()
    results["seeds"] = [0, 1]
    rows = _rows(results)
    assert all(row["verdict"] == "not testable at this scale" for row in rows.values())


def test_s7_says_when_post_ln_fails_by_stalling_at_the_unigram_level():
    results = _results()
    assert "stalled at the unigram predictor" not in _rows(results)["S7"]["measured"]  # 2.65: degraded, not stalled
    results["s7"]["summary"]["post"]["18"] = _entry((H, H + 0.01, H - 0.01))
    measured = _rows(results)["S7"]["measured"]
    assert "stalled at the unigram predictor: final loss - H(p) L=18: +0.000 [" in measured


def test_d2_at_another_width_is_a_second_row_whose_checks_combine():
    flat = [0.01, -0.01, 0.02, 0.0, -0.02, 0.01, 0.0, -0.01, 0.02]
    grows = [1.2, 1.3, 1.25, 1.28, 1.22, 1.31, 1.27, 1.24, 1.26]
    results = _with_d2(_results(), grows, flat)
    wider = _with_d2(_results(), grows, [0.6] * 9)  # at the other width DeepNorm's update grows too
    results["d2"]["widths"] = {"128": wider["d2"]["early_update"]}
    results["d2"]["fits"] = {"128": wider["update_fits"]}
    rows = [row for row in judge("deep_training", results) if row["claim"] == "D2"]
    assert [row["verdict"] for row in rows] == ["holds", "partly holds"]
    assert rows[1]["key"].startswith("d 128 (early-update-only runs): ")
    assert claim_verdict(rows) == "partly holds"


def test_early_update_run_equals_a_full_runs_d2_part():
    # the extra D2 seeds measure only D2's part of a run: the same init, batches and step, so the same number
    config = _tiny()
    full = runs.train_run(config, "post", 2, 5)
    alone = runs.early_update_run(config, "post", 2, 5)
    assert alone == {"seed": 5, "early_update": runs.mean_early_update(full["small_lr_update"])}


def _with_d2(results, post_slopes, deepnorm_slopes):
    """`results` with D2 over len(post_slopes) seeds: per-seed updates at depths 6 and 18 with those slopes."""
    out = copy.deepcopy(results)
    update = lambda e: [1.0, float(3.0**e)]  # slope e over 6 -> 18 layers
    out["d2"] = {
        "seeds": list(range(len(post_slopes))),
        "early_update": {
            "post": {d: [update(e)[i] for e in post_slopes] for i, d in enumerate(("6", "18"))},
            "deepnorm": {d: [0.1 * update(e)[i] for e in deepnorm_slopes] for i, d in enumerate(("6", "18"))},
        },
    }
    out["update_fits"] = {
        "post": [{"exponent": e} for e in post_slopes],
        "deepnorm": [{"exponent": e} for e in deepnorm_slopes],
    }
    return out


def test_d2_is_judged_on_the_median_slope_of_its_own_seeds():
    flat = [0.01, -0.01, 0.02, 0.0, -0.02, 0.01, 0.0, -0.01, 0.02]
    post = [1.2, 1.3, 1.25, 1.28, 1.22, 1.31, 1.27, 1.24, -3.0]  # one heavy-tailed seed: the mean's interval
    row = _rows(_with_d2(_results(), post, flat))["D2"]  # straddles 0.2, the median's does not
    assert row["verdict"] == "holds" and "(9 seeds, order statistics)" in row["key"], row["reason"]
    assert "mean: Post-LN" in row["measured"]
    # a DeepNorm slope that grows as Post-LN's does is not flat
    assert _rows(_with_d2(_results(), post, [0.6] * 9))["D2"]["verdict"] == "partly holds"
    # 3 seeds: the median's order-statistic interval is infinite, so no direction is resolved
    assert _rows(_results())["D2"]["verdict"] == INCONCLUSIVE
