"""warmup_ablation's runs as cells and lr curves: the run groups, Wortsman et al. 2023's LR sensitivity."""

from __future__ import annotations

import math

import numpy as np

from normjax.studies.warmup_ablation.config import (
    DEPTH_LR,
    EDGE,
    LOW_LR,
    OLMO2,
    QK_NORM,
    SIDE_SEEDS,
    TRANSLATION,
    Z_LOSS,
)
from normjax.train import outcomes

FAILED = outcomes.FAILED  # a run that did not learn: diverged, or stalled at the unigram plateau


MITIGATIONS = (QK_NORM, Z_LOSS, OLMO2)  # grids whose model differs from their placement's plain one


def relabel(results: dict, band: float | None = None, falling: float | None = None) -> dict:
    """`results` with every run's `outcome` judged now from its stored validation curve (outcomes.label, at the
    given thresholds) and the plateau levels they were judged against (`stall_nll`, per run and for the byte LM):
    no label written when a run ended is used, so a moved threshold moves every label."""
    runs = [r | {"outcome": outcomes.label(r, band=band, falling=falling)} for r in results["runs"]]
    level = lambda h: None if h is None else outcomes.plateau_level(h, band)
    runs = [r | {"stall_nll": level(r.get("unigram_nll"))} for r in runs]
    return results | {"runs": runs, "stall_nll": level(results.get("unigram_nll"))}


def lm_runs(results: dict) -> list[dict]:
    """The language-model runs: every run but the translation arm's (another task, another unigram level)."""
    return [r for r in results["runs"] if r.get("group") != TRANSLATION]


def translation_runs(results: dict) -> list[dict]:
    return [r for r in results["runs"] if r.get("group") == TRANSLATION]


def lr_sensitivity(finals: list[float | None], init_loss: float) -> float:
    """Wortsman et al. 2023's LR sensitivity of one curve (arXiv 2309.14322, Sec. 3.1): the mean over the lr grid
    of min(final loss, init loss) minus the best final loss; a failed run (diverged: None, or any loss above the
    init loss) counts at the init loss. 0 for a curve flat at its best; init - best when one lr alone trains."""
    capped = [init_loss if v is None or not np.isfinite(v) else min(v, init_loss) for v in finals]
    return float(np.mean(capped) - min(capped))


def curve_key(r: dict) -> tuple:
    """The runs of one lr curve: same grid (DEPTH_LR's runs extend the depth grid's), placement, depth, warmup,
    optimizer and seed."""
    group = r.get("group", "")
    return ("depth" if group == DEPTH_LR else group, r["placement"], r["depth"], r["warmup"], r["optimizer"], r["seed"])


def sensitivity_curves(results: dict) -> list[dict]:
    """One entry per lr curve (a seed of one placement, depth, warmup and optimizer): its lrs, final valid
    nll per lr (None when diverged), the init loss and the LR sensitivity."""
    curves: dict = {}
    for r in lm_runs(results):
        curves.setdefault(curve_key(r), []).append(r)
    out = []
    for (group, placement, depth, warmup, optimizer, seed), rows in sorted(curves.items(), key=lambda kv: str(kv[0])):
        if group in (EDGE, LOW_LR) or group.startswith(SIDE_SEEDS):  # extra seeds or lrs of cells: no curve
            continue
        rows = sorted(rows, key=lambda r: r["lr"])
        finals = [None if r["outcome"] == "diverged" else r["final_valid_nll"] for r in rows]
        inits = [r.get("init_valid_nll") for r in rows if r.get("init_valid_nll") is not None]
        init = float(np.mean(inits)) if inits else math.log(results.get("vocab_size") or 256)
        out.append(
            dict(
                group=group, placement=placement, depth=depth, warmup=warmup, optimizer=optimizer, seed=seed,
                lrs=[r["lr"] for r in rows], final=finals, outcomes=[r["outcome"] for r in rows], init_nll=init,
                sensitivity=lr_sensitivity(finals, init) if len(rows) > 1 else None,
            )
        )  # fmt: skip
    return out


def main_rows(results: dict) -> list[dict]:
    """The main grid's runs (config.sweep.axes: the preset's schedule, Adam, the model's depth)."""
    return [r for r in results["runs"] if not r.get("group")]
