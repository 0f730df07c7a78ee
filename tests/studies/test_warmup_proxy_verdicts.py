"""warmup_ablation's W1-W3 rules (Wortsman et al.'s small-scale proxies) on synthetic lr curves."""

import numpy as np

from normjax.report.claims import NOT_TESTABLE
from normjax.studies.warmup_ablation import proxy_verdicts
from normjax.studies.warmup_ablation import verdicts as rules
from normjax.studies.warmup_ablation.curves import lr_sensitivity

LRS = [1e-4, 1e-3, 1e-2]
INIT = 5.5


def _run(lr, seed, nll, logit, mean_logit, warmup=0, group="", depth=6, placement="pre"):
    return dict(
        name=f"{group}{placement}{lr}{warmup}{seed}{depth}", group=group, placement=placement, depth=depth, lr=lr,
        warmup=warmup, seed=seed, optimizer="adam", outcome="ok", final_valid_nll=nll, init_valid_nll=INIT,
        attn_logit_max=[[0, [1.0, 1.0]], [10, [logit, logit / 2]]], output_logit_mean=[[0, 0.0], [10, mean_logit]],
    )  # fmt: skip


def _curve(nlls, logits, means, seed, **kw):
    return [_run(lr, seed, n, a, m, **kw) for lr, n, a, m in zip(LRS, nlls, logits, means, strict=True)]


def _results(*curves):
    return {"runs": [r for c in curves for r in c]}


def _rows(results):
    return {(r["claim"], r["prediction"].split("(")[-1]): r for r in proxy_verdicts.verdicts(results, rules.THRESHOLDS)}


GROWING, FLAT = [5.0, 50.0, 500.0], [5.0, 5.0, 5.0]
DRIFTING = [-2.0, -5.0, -8.0]


def _seeds(nlls, logits=GROWING, means=DRIFTING, jitter=0.01, **kw):
    return [_curve(np.add(nlls, jitter * s), np.multiply(logits, 1 + jitter * s), means, s, **kw) for s in range(3)]


def test_w1_holds_when_attention_logits_grow_and_output_logits_drift_with_lr():
    results = _results(*_seeds([2.5, 2.3, 2.8]), *_seeds([2.5, 2.3, 2.6], warmup=100))
    w1 = proxy_verdicts.logit_growth(results, rules.THRESHOLDS)
    assert w1["verdict"] == "holds" and "e = +1.00" in w1["measured"]


def test_w1_does_not_hold_when_neither_grows():
    results = _results(*_seeds([2.5, 2.3, 2.8], logits=FLAT, means=[-2.0, -1.0, 0.0]))
    assert proxy_verdicts.logit_growth(results, rules.THRESHOLDS)["verdict"] == "does not hold"


def test_w1_without_diagnostics_is_not_testable():
    results = _results(*_seeds([2.5, 2.3, 2.8]))
    for r in results["runs"]:
        r["attn_logit_max"] = []
    assert proxy_verdicts.logit_growth(results, rules.THRESHOLDS)["verdict"] == NOT_TESTABLE


def test_w2_parts_are_judged_on_paired_sensitivities_and_missing_arms_are_not_testable():
    plain, warm = [2.5, 2.3, 3.5], [2.5, 2.3, 2.6]  # warmup rescues the top lr: lower sensitivity on every seed
    results = _results(*_seeds(plain), *_seeds(warm, warmup=100), *_seeds(warm, group="qk_norm"))
    rows = _rows(results)
    assert rows[("W2", "warmup part)")]["verdict"] == "holds"
    assert rows[("W2", "qk-layernorm part)")]["verdict"] == "holds"
    assert rows[("W2", "z-loss part)")]["verdict"] == NOT_TESTABLE
    assert rows[("W2", "size part)")]["verdict"] == NOT_TESTABLE  # no depth curves over the main lrs
    want = lr_sensitivity(warm, INIT) - lr_sensitivity(plain, INIT)  # a shift of a whole curve keeps it
    assert abs(rows[("W2", "warmup part)")]["numbers"]["paired_change"] - want) < 1e-9


def test_w2_size_part_compares_deeper_curves_over_the_same_lrs():
    results = _results(*_seeds([2.5, 2.3, 2.6]), *_seeds([2.5, 2.4, 3.9], group="depth", depth=12))
    assert _rows(results)[("W2", "size part)")]["verdict"] == "holds"


def test_w2_straddling_change_is_inconclusive():
    noisy = [_curve([2.5, 2.3, 2.6 + d], GROWING, DRIFTING, s, warmup=100) for s, d in enumerate([-0.3, 0.4, 0.0])]
    results = _results(*_seeds([2.5, 2.3, 2.6], jitter=0.0), *noisy)
    assert _rows(results)[("W2", "warmup part)")]["verdict"] == "inconclusive at this scale"


def test_w3_needs_the_qk_norm_arm_and_judges_it_at_the_top_lr():
    plain = _seeds([2.5, 2.3, 3.5])
    assert proxy_verdicts.early_logits(_results(*plain), rules.THRESHOLDS)["verdict"] == NOT_TESTABLE
    qk = _seeds([2.5, 2.3, 2.6], logits=FLAT, group="qk_norm")
    assert proxy_verdicts.early_logits(_results(*plain, *qk), rules.THRESHOLDS)["verdict"] == "holds"
    worse = _seeds([2.5, 2.3, 3.9], logits=[5.0, 60.0, 900.0], group="qk_norm")
    assert proxy_verdicts.early_logits(_results(*plain, *worse), rules.THRESHOLDS)["verdict"] == "does not hold"


def test_a_diverged_run_drops_its_seed_and_never_gives_a_number():
    curves = _seeds([2.5, 2.3, 2.8])
    curves[0][2]["attn_logit_max"] = [[0, [1.0, float("nan")]], [10, [float("inf"), 2.0]]]
    w1 = proxy_verdicts.logit_growth(_results(*curves), rules.THRESHOLDS)
    assert w1["verdict"] == "inconclusive at this scale" and "(2 seeds)" in w1["measured"]
    qk = _seeds([2.5, 2.3, 2.6], logits=FLAT, group="qk_norm")
    qk[1][2]["final_valid_nll"] = None
    w3 = proxy_verdicts.early_logits(_results(*_seeds([2.5, 2.3, 3.5]), *qk), rules.THRESHOLDS)
    assert w3["verdict"] == "inconclusive at this scale" and "(2 seeds" in w3["measured"]
