"""Verdict rule of cost: Pre-LN and Post-LN cost the same time and memory per step (S6)."""

from __future__ import annotations

from normjax.report import verdict_row
from normjax.report.rules import Threshold, combine, log_ci, power_note, require_seeds
from normjax.studies.cost.measure import MEMORY_TOLERANCE, TIME_TOLERANCE

THRESHOLDS = {
    "TIME_TOLERANCE": Threshold(
        TIME_TOLERANCE,
        "the post/pre CPU-time ratio is 'equal' when its whole 95% interval over seeds (each seed: the median of "
        "its rounds) lies inside [0.9, 1.1]. XLA counts 0.6% fewer FLOPs for Post-LN (Pre-LN's final norm), so a "
        "difference beyond 10% is not the architecture; the per-seed ratios spread by about 0.02 to 0.08 on the "
        "shared 2-core CPU (quick preset, 3 seeds)",
        source="convention",
    ),
    "MEMORY_TOLERANCE": Threshold(
        MEMORY_TOLERANCE,
        "the post/pre ratio of XLA's compiled memory (arguments + outputs - aliased + temp) within 5%: an exact "
        "count from the compiler, the same at every seed (no interval); Pre-LN's final norm adds 2d parameters",
        source="convention",
    ),
}


def same_cost(results: dict) -> list[dict]:
    runs, ref = results["runs"], results["reference"]
    if "post" not in runs or ref != "pre":
        return []
    rel = runs["post"]["relative"]
    time_tol, memory_tol = THRESHOLDS["TIME_TOLERANCE"].value, THRESHOLDS["MEMORY_TOLERANCE"].value
    time = log_ci(rel["time_seeds"])
    time_ok = time.within(1 - time_tol, 1 + time_tol)
    memory_ok = abs(rel["memory"] - 1) <= memory_tol
    wall = log_ci(rel["wall_time_seeds"])
    others = ", ".join(
        f"{p} {log_ci(r['relative']['time_seeds']).mean:.2f}/{r['relative']['memory']:.2f}"
        for p, r in runs.items()
        if p not in ("pre", "post")
    )
    measured = (
        f"post/pre: CPU time per step {time.text('.3f')} (pre {1e3 * runs['pre']['cpu']['median']:.1f} ms; "
        f"{results['repeats']} rounds per seed; wall-clock ratio {wall.text('.3f')}), XLA memory "
        f"{rel['memory']:.3f} (temp {rel['temp']:.3f}), XLA FLOPs "
        f"{'n/a' if rel['flops'] is None else format(rel['flops'], '.3f')}; "
        f"pre has {runs['pre']['num_params'] - runs['post']['num_params']} more parameters (its final norm, "
        f"2d = {2 * results['size']['d_model']}); CPU time/memory vs pre (seed means): {others}"
    )
    reason = (
        f"rule: the 95% interval over seeds of the post/pre CPU-time ratio lies inside "
        f"[{1 - time_tol:g}, {1 + time_tol:g}] and |memory ratio - 1| <= {memory_tol:g} -> holds, one of the two "
        "-> partly holds, neither -> does not hold (CPU time of this process, as other jobs share the cores: a "
        f"timing of this machine under its load); sizes {results['size']} on {results['device']}"
        + power_note("the time ratio", time, 1 - time_tol, 1 + time_tol)
    )
    return [
        verdict_row(
            "S6",
            "Pre-LN and Post-LN cost the same time and memory per step",
            measured,
            combine([time_ok, memory_ok]),
            reason,
            "cost.png",
            key=f"time ratio {time.text('.3f')}; memory ratio {rel['memory']:.3f}",
            **{p: r["relative"] for p, r in runs.items()},
        )
    ]


def verdicts(results: dict) -> list[dict]:
    return require_seeds(same_cost(results), results["num_seeds"])
