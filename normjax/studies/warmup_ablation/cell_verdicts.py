"""warmup_ablation's cells: the runs of one (placement, depth, lr, warmup) and whether they train or fail."""

from __future__ import annotations

from normjax.report.rules import MIN_SEEDS, mean_ci
from normjax.studies.warmup_ablation.curves import FAILED


def runs_in(rows, **match) -> list[dict]:
    """The runs of `rows` whose fields equal `match` (one cell of the grid)."""
    return [r for r in rows if all(r[k] == v for k, v in match.items())]


def cell_state(cell: list[dict], stall_nll: float) -> str:
    """'fails' (every seed stalled or diverged), 'trains' (every seed trained and the seeds' final nll interval
    below the plateau level `stall_nll`), 'slow' (no seed failed, some still falling at the plateau level: under-
    training, not instability), 'mixed', 'too few seeds' or 'absent'. Outcomes are `curves.relabel`'s."""
    if not cell:
        return "absent"
    if len({r["seed"] for r in cell}) < MIN_SEEDS:
        return "too few seeds"
    if all(r["outcome"] in FAILED for r in cell):
        return "fails"
    finals = mean_ci([r["final_valid_nll"] for r in cell])
    if all(r["outcome"] == "trained" for r in cell) and finals.below(stall_nll):
        return "trains"
    if not any(r["outcome"] in FAILED for r in cell) and any(r["outcome"] == "slow" for r in cell):
        return "slow"
    return "mixed"


def describe(cell: list[dict]) -> str:
    """A cell's outcomes, final nll interval and steps to the target, in words."""
    if not cell:
        return "no runs"
    counts = {o: sum(r["outcome"] == o for r in cell) for o in ("trained", "slow") + FAILED}
    finals = [r["final_valid_nll"] for r in cell if r["outcome"] != "diverged"]
    nll = f", nll {mean_ci(finals).text('.2f')}" if finals else ""
    reached = [r["steps_to_target"] for r in cell if r.get("steps_to_target") is not None]
    target = f", target reached by {len(reached)}/{len(cell)}" + (
        f" at step {mean_ci(reached).text('.0f')}" if len(reached) > 1 else ""
    )
    return "/".join(f"{n} {o}" for o, n in counts.items() if n) + nll + target
