"""What the committed `:standard` report cost, part by part, and what a 150-minute `:standard` would leave out.

  python -m benchmarks.standard_budget [--results=docs/results] [--budget_min=150]

Reads the committed results (each study's results.json wall time; warmup_ablation's sweep.json, one wall time per
run) and prints one table: per study, and per sub-grid of warmup_ablation, the runs, the cost in worker-minutes
(a sub-grid: its runs' median wall time x its runs, robust to runs that were held with SIGSTOP while CI was timed)
and the claims it decides. Then the plan CUT (below): the parts that move to accelerator groups, the claims that
would wait for a device, and the projected wall time of what stays (the other studies one after another, the
warmup grid on its 2 workers) against the budget. Nothing is trained; every number comes from the files.
"""

import argparse
import os
import statistics

from normjax.io import read_json

# What each part decides (the claims whose verdicts read it; from the studies' configs and rules).
DECIDES = {
    "hidden_norms": "S4, X2, X3, R4",
    "ln_jacobian": "S1, S2, X1, X4",
    "grad_norms_at_init": "S1, S3, X6, L3, R5 (init)",
    "depth_scaling": "S2, X5",
    "jacobian_spectrum": "S3, S7, R1, R2, N1 (init), N2",
    "amplification": "L1, L2",
    "deep_training": "S4, S7, D1-D3, R3, R4, R6",
    "trained_layers": "R5, N1 (trained)",
    "answer": "A1-A5",
    "cost": "S6",
    "accelerator_groups": "S5, X7, R5 from the groups' folders (reads files)",
    "warmup_ablation/analysis": "the warmup study's analysis of its runs",
    "warmup_ablation/axes": "S5 (6 layers), W1, W3, the answer table",
    "warmup_ablation/edge": "S5 (its deciding cell at 5 seeds)",
    "warmup_ablation/depth": "S5 (12 layers), the answer table's 12-layer rows",
    "warmup_ablation/depth_lr": "W2 (its size part), 12-layer lr curves",
    "warmup_ablation/low_lr": "the 12-layer critical-lr bracket",
    "warmup_ablation/translation": "X7 (2-2 layers)",
    "warmup_ablation/qk_norm": "W2, W3",
    "warmup_ablation/z_loss": "W2",
}
# The parts a 150-minute :standard would move to accelerator groups: the largest that no other :standard part
# can stand in for, each with the standby group that runs its cells cell for cell (groups.py).
CUT = {
    "warmup_ablation/depth": "depth12",
    "warmup_ablation/depth_lr": "depth12_lr",
    "warmup_ablation/low_lr": "depth12_low",
    "answer": "answer_std",
    "trained_layers": "trained_std",
}
WORKERS = 2  # warmup_ablation's :standard sweep workers


def parts(results: str) -> dict[str, dict]:
    """{part: {"runs", "minutes" (worker-minutes), "workers"}}: every study, and for a study whose sweep trains
    before its analysis (warmup_ablation) each sub-grid of the sweep and the analysis; a study whose compute runs
    its own sweep (answer) is one part, its results.json's wall time."""
    from normjax.studies import BY_NAME

    out = {}
    for name in sorted(os.listdir(results)):
        path = os.path.join(results, name, "results.json")
        if not os.path.isfile(path):
            continue
        wall = float(read_json(path).get("wall_time_s") or 0.0) / 60
        sweep = os.path.join(results, name, "sweep.json")
        if not (getattr(BY_NAME.get(name), "sweep_before_compute", False) and os.path.exists(sweep)):
            out[name] = {"runs": None, "minutes": wall, "workers": 1}
            continue
        grids: dict[str, list[float]] = {}
        for run in read_json(sweep)["runs"]:
            grids.setdefault(run.get("group") or "axes", []).append(float(run["summary"]["wall_time_s"]))
        for grid, walls in sorted(grids.items()):
            out[f"{name}/{grid}"] = {"runs": len(walls), "minutes": statistics.median(walls) * len(walls) / 60}
            out[f"{name}/{grid}"]["workers"] = WORKERS
        out[f"{name}/analysis"] = {"runs": None, "minutes": wall, "workers": 1}
    return out


def wall_minutes(found: dict[str, dict], left_out=()) -> float:
    """The projected wall time: the studies one after another, a sweep's sub-grids on its workers."""
    return sum(v["minutes"] / v["workers"] for k, v in found.items() if k not in left_out)


def table(found: dict[str, dict], budget: float) -> list[str]:
    lines = ["| part | runs | worker-min | decides | at 150 min |", "|---|---|---|---|---|"]
    for part, v in sorted(found.items(), key=lambda kv: -kv[1]["minutes"]):
        runs = "-" if v["runs"] is None else v["runs"]
        where = f"moves to {CUT[part]}" if part in CUT else "stays"
        lines.append(f"| {part} | {runs} | {v['minutes']:.1f} | {DECIDES.get(part, 'curves, not judged')} | {where} |")
    now, cut = wall_minutes(found), wall_minutes(found, CUT)
    waits = "; ".join(f"{DECIDES.get(p, p)}" for p in CUT)
    lines += [
        "",
        f"All of it: {now:.0f} min of wall time ({WORKERS} sweep workers); without the parts that move: {cut:.0f} "
        f"min against the {budget:.0f}-minute budget ({'within' if cut <= budget else 'over'} it). Waiting for a "
        f"device then: {waits}.",
    ]
    return lines


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--results", default="docs/results")
    parser.add_argument("--budget_min", type=float, default=150.0)
    args = parser.parse_args(argv)
    print("\n".join(table(parts(args.results), args.budget_min)))


if __name__ == "__main__":
    main()
