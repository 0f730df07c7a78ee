"""Outcomes judged from stored curves: each label on runs built to plateau at, near and far from H(p), or to fall."""

import pytest

from normjax.studies import BY_NAME
from normjax.studies.judge import moved
from normjax.studies.warmup_ablation import curves
from normjax.studies.warmup_ablation.verdicts import judged, warmup_sensitivity
from normjax.train import outcomes

H = 3.0  # the unigram level of these synthetic runs; plateau level (1 - 0.05) H = 2.85


def _run(final, drop=0.0, diverged_step=None, steps=600, **extra):
    """A run whose stored validation curve ends at `final`, having fallen by `drop` over its last third."""
    end = 9.0 if final is None else final  # a run without a final number: its curve is not read
    curve = [[0, 5.5], [steps // 3, end + drop + 0.3], [2 * steps // 3, end + drop], [steps, final]]
    return {"final_valid_nll": final, "valid_nll": curve, "unigram_nll": H, "diverged_step": diverged_step} | extra


@pytest.mark.parametrize(
    "run, expected",
    [
        (_run(3.2), "stalled"),  # flat above H: the unigram plateau
        (_run(3.0, drop=0.01), "stalled"),  # flat at H
        (_run(2.9, drop=-0.02), "stalled"),  # near H (above the level 2.85), creeping up
        (_run(2.9, drop=0.15), "slow"),  # near H but still falling: under-trained, not failed
        (_run(2.84), "trained"),  # just below the plateau level, flat
        (_run(2.2, drop=0.2), "trained"),  # far from H
        (_run(2.2, diverged_step=300), "diverged"),  # a recorded divergence wins over any number
        (_run(float("nan")), "diverged"),
        (_run(None), "diverged"),
        ({"final_valid_nll": 3.1, "valid_nll": [[0, 5.0], [600, 3.1]], "unigram_nll": H}, "slow"),  # 2 points
        ({"final_valid_nll": 3.1, "valid_nll": [[600, 3.1]], "unigram_nll": H}, "stalled"),  # no slope to read
        ({"final_valid_nll": 2.5, "outcome": "diverged", "unigram_nll": H}, "diverged"),  # an older record
    ],
)
def test_each_label_from_the_curve(run, expected):
    assert outcomes.label(run) == expected


def test_the_thresholds_move_the_labels():
    near = _run(2.8, drop=0.02)  # 0.933 H, nearly flat
    assert outcomes.label(near) == "trained"
    assert outcomes.label(near, band=0.075) == "stalled"  # the level rises to 2.775: at the plateau, flat
    assert outcomes.label(near, band=0.075, falling=0.01) == "slow"
    with pytest.raises(ValueError, match="no unigram level"):
        outcomes.label({"final_valid_nll": 2.0, "valid_nll": []})


def test_no_label_is_read_from_the_record():
    """A run-time 'stalled' beside a curve that left the plateau is overridden; so is a run-time 'ok'."""
    results = {"runs": [_run(2.5, outcome="stalled"), _run(3.2, outcome="ok")], "unigram_nll": H}
    assert [r["outcome"] for r in curves.relabel(results)["runs"]] == ["trained", "stalled"]


def _cell(placement, lr, warmup, finals, drop=0.0):
    return [
        _run(f, drop=drop, name=f"{placement}{lr}{warmup}{s}", placement=placement, lr=lr, warmup=warmup, seed=s,
             depth=6, group="", optimizer="adam")
        for s, f in enumerate(finals)
    ]  # fmt: skip


def test_the_sensitivity_move_of_the_plateau_band_relabels_runs_and_moves_s5():
    """Post-LN without warmup ends flat at 0.93 H: trained at the default band (0.05), stalled when the band moves
    by +50% (0.075): then it fails where Pre-LN trains and warmup rescues it, and S5 holds."""
    runs = (
        _cell("post", 1e-2, 0, [2.79, 2.8, 2.81])
        + _cell("pre", 1e-2, 0, [2.2, 2.25, 2.3])
        + _cell("post", 1e-2, 100, [2.3, 2.32, 2.35])
    )
    results = {"runs": runs, "unigram_nll": H}
    assert warmup_sensitivity(judged(results))["verdict"] == "does not hold"
    with moved(BY_NAME["warmup_ablation"], "PLATEAU_BAND", 0.5):
        relabelled = judged(results)
        assert {r["outcome"] for r in relabelled["runs"] if r["placement"] == "post" and not r["warmup"]} == {"stalled"}
        assert warmup_sensitivity(relabelled)["verdict"] == "holds"
    assert judged(results)["runs"][0]["outcome"] == "trained"  # restored
