"""A run's outcome: the provisional label a run shows when it ends, and the one judged from its stored curves."""

from __future__ import annotations

import math

from normjax.threshold import Threshold

OUTCOMES = ("ok", "stalled", "diverged")

STALL_FRACTION = 0.10
STALL_WHY = (
    "a run is 'stalled' when its final validation nll is at or above (1 - 0.10) x H, H the unigram entropy of "
    "the training targets: it has recovered less than a tenth of the entropy that token frequencies leave, i.e. "
    "learnt the frequencies and next to nothing of the input. The level is absolute (a property of the data, not "
    "of the other runs of a sweep). At warmup_ablation:quick (H = 4.24 nats, 57 runs of 3 seeds) the final nll "
    "falls into two groups: 36 runs at 0.62-0.89 H and 21 at 0.93-1.03 H (15 of them at 0.99 H or above, "
    "accuracy 0.10, the frequency of the commonest token); any fraction from 0.07 to 0.11 gives the same "
    "outcomes there. Cells near the failure edge had seeds on both sides, so rules count seeds, not one run"
)


def stall_level(unigram_nll: float) -> float:
    """The validation nll at or above which a finished run is 'stalled': (1 - STALL_FRACTION) x H."""
    return (1.0 - STALL_FRACTION) * unigram_nll


def classify(diverged: bool, final_valid_nll: float | None, unigram_nll: float) -> str:
    """'diverged', 'stalled' or 'ok' for a finished run.

    A non-finite final validation nll counts as diverged (the model's predictions are no longer numbers).

    Raises:
      ValueError: when a run that did not diverge has no final validation nll (nothing to judge it by).
    """
    if diverged:
        return "diverged"
    if final_valid_nll is None:
        raise ValueError("a finished run needs a final valid/nll to tell 'ok' from 'stalled'")
    if not math.isfinite(final_valid_nll):
        return "diverged"
    return "stalled" if final_valid_nll >= stall_level(unigram_nll) else "ok"


# --- Outcomes judged from the stored curves (when the report is built; nothing of this is frozen into a record) ---
LABELS = ("diverged", "stalled", "slow", "trained")
FAILED = ("diverged", "stalled")  # a run that did not learn: its numbers or its loss left nothing to compare
THRESHOLDS = {
    "PLATEAU_BAND": Threshold(
        0.05,
        "a run ends 'at the unigram plateau level' when its final validation nll is at or above (1 - 0.05) x H, H "
        "the unigram entropy of the training targets (a property of the data): within 5% of what token "
        "frequencies alone give. Fixed before the pilot; checked on pilot seeds 1000-1001 at "
        "the byte LM of the lr x warmup study at :standard (20 runs: scripts/pilot_outcome_labels.py, its "
        "summary committed beside that study's results.json; H = 3.13 nats): the "
        "runs that never left the plateau end at 1.03-1.06 H, the slow learners (12-layer Post-LN at lr 1e-4) at "
        "0.97-0.98 H, every other run at or below 0.88 H; any band from 0.03 to 0.11 gives the same labels there "
        "(-50%, 0.025, labels the slow learner at 0.973 H 'trained')",
        source="pilot",
    ),
    "STILL_FALLING": Threshold(
        0.03,
        "nats: a run at the plateau level is 'slow' (still learning) rather than 'stalled' when its validation nll "
        "fell by at least this much over the last third of the run (from the first evaluation at or after 2/3 of "
        "its steps to its last). Fixed before the pilot; on pilot seeds 1000-1001 (pilot_outcomes.json) the runs "
        "flat at 1.05-1.06 H moved by -0.002 to +0.022 there and the slow learners at 0.97-0.98 H fell by 0.095 "
        "and 0.156; knife-edge: 12-layer Post-LN at lr 10^-3.5 sits at 1.03 H falling by 0.019 and 0.033 (one "
        "seed each side)",
        source="pilot",
    ),
}


def plateau_level(unigram_nll: float, band: float | None = None) -> float:
    """The validation nll at or above which a run ends at the unigram plateau level: (1 - band) x H."""
    return (1.0 - (THRESHOLDS["PLATEAU_BAND"].value if band is None else band)) * unigram_nll


def recent_drop(curve: list, window: float = 1 / 3) -> float | None:
    """How much a [[step, value], ...] curve fell over its last `window` of steps: the value at the first step at
    or after (1 - window) x the last step (or the point before the last, if that is later) minus the last value;
    None with fewer than two finite points."""
    points = [(s, v) for s, v in curve if v is not None and math.isfinite(v)]
    if len(points) < 2:
        return None
    start = (1.0 - window) * points[-1][0]
    first = next(i for i, (s, _) in enumerate(points) if s >= start)
    first = min(first, len(points) - 2)  # a window holding only the last point reaches back one evaluation
    return points[first][1] - points[-1][1]


def label(run: dict, unigram_nll: float | None = None, band: float | None = None, falling: float | None = None) -> str:
    """A run's outcome from its stored curve: 'diverged' (its divergence step is recorded, or its final nll is not
    a number), 'trained' (final validation nll below the plateau level), 'slow' (at the plateau level but its
    validation nll still falling by >= STILL_FALLING over the last third of the run) or 'stalled' (at the plateau
    level and flat). `run` holds `final_valid_nll`, `valid_nll` ([[step, nll], ...]) and `diverged_step` (or an
    older record's `outcome` == 'diverged'); `unigram_nll` defaults to the run's own.

    Raises:
      ValueError: when neither the run nor the caller gives the unigram level (nothing to judge a plateau by).
    """
    if run.get("diverged_step") is not None or run.get("diverged") or run.get("outcome") == "diverged":
        return "diverged"
    final = run.get("final_valid_nll")
    if final is None or not math.isfinite(final):
        return "diverged"
    unigram = run.get("unigram_nll") if unigram_nll is None else unigram_nll
    if unigram is None:
        raise ValueError(f"run {run.get('name', '?')!r} has no unigram level to judge its plateau by")
    if final < plateau_level(unigram, band):
        return "trained"
    drop = recent_drop(run.get("valid_nll") or [])
    limit = THRESHOLDS["STILL_FALLING"].value if falling is None else falling
    return "slow" if drop is not None and drop >= limit else "stalled"
