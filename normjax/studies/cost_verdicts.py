"""Verdict rule of cost: Pre-LN and Post-LN cost the same time and memory per step (S6)."""

from __future__ import annotations

from normjax.report import verdict_row

TIME_TOLERANCE = 0.10  # |median CPU time per step post/pre - 1|
MEMORY_TOLERANCE = 0.05  # |XLA total memory post/pre - 1|


def same_cost(results: dict) -> list[dict]:
    runs, ref = results["runs"], results["reference"]
    if "post" not in runs or ref != "pre":
        return []
    rel = runs["post"]["relative"]
    time_ok = abs(rel["time"] - 1) <= TIME_TOLERANCE
    memory_ok = abs(rel["memory"] - 1) <= MEMORY_TOLERANCE
    q25, q75 = runs["pre"]["cpu"]["iqr"]
    noise = (q75 - q25) / runs["pre"]["cpu"]["median"]
    others = ", ".join(
        f"{p} {r['relative']['time']:.2f}/{r['relative']['memory']:.2f}"
        for p, r in runs.items()
        if p not in ("pre", "post")
    )
    measured = (
        f"post/pre: CPU time per step {rel['time']:.3f} (pre {1e3 * runs['pre']['cpu']['median']:.1f} ms, "
        f"IQR/median {noise:.2f} over {len(runs['pre']['cpu']['s'])} rounds; wall-clock ratio "
        f"{rel['wall_time']:.3f}), XLA memory {rel['memory']:.3f} (temp {rel['temp']:.3f}), XLA FLOPs "
        f"{'n/a' if rel['flops'] is None else format(rel['flops'], '.3f')}; "
        f"pre has {runs['pre']['num_params'] - runs['post']['num_params']} more parameters (its final norm, "
        f"2d = {2 * results['size']['d_model']}); CPU time/memory vs pre: {others}"
    )
    verdict = {(True, True): "holds", (False, False): "does not hold"}.get((time_ok, memory_ok), "partly holds")
    reason = (
        f"rule: |CPU-time ratio - 1| <= {TIME_TOLERANCE:g} and |memory ratio - 1| <= {MEMORY_TOLERANCE:g} "
        "holds, one of the two partly (CPU time of this process, as other jobs share the cores); sizes "
        f"{results['size']} on {results['device']}"
    )
    return [
        verdict_row(
            "S6",
            "Pre-LN and Post-LN cost the same time and memory per step",
            measured,
            verdict,
            reason,
            "cost.png",
            **{p: r["relative"] for p, r in runs.items()},
        )
    ]


def verdicts(results: dict) -> list[dict]:
    return same_cost(results)
