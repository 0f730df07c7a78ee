"""Verdict rules of accelerator_groups: S5 at 12 layers, X7 at 6-6, R5 at 24, deep_training at d 128; or it waits.

The groups' runs are judged by warmup_ablation's cell rules (outcomes from each run's stored validation curve,
cell states over >= 3 seeds), so a run on an accelerator and one on this CPU mean the same. A group that has not
run, ran at its tiny size (a test of the machinery) or was cut off before its last run gives a 'not testable'
row that names it and says what it waits for: such a row adds nothing to its claim's verdict.
"""

from __future__ import annotations

import math

import numpy as np

from normjax.report import verdict_row
from normjax.report.claims import NOT_TESTABLE
from normjax.report.rules import Check, combine
from normjax.studies.accelerator_groups.groups import GROUPS, StudyGroup
from normjax.studies.trained_layers.verdicts import mixln_flatter_in_training
from normjax.studies.warmup_ablation.cell_verdicts import cell_state, describe, runs_in
from normjax.studies.warmup_ablation.config import DEPTH_LR, LOW_LR
from normjax.studies.warmup_ablation.curves import relabel
from normjax.studies.warmup_ablation.translation_verdicts import translation_verdict
from normjax.studies.warmup_ablation.verdicts import answer_table, warmup_sensitivity
from normjax.train import outcomes

THRESHOLDS = dict(outcomes.THRESHOLDS)  # the outcome labels' (PLATEAU_BAND, STILL_FALLING): moved on their own
S5_GROUPS, FIG2_GROUP, R5_GROUPS = ("s5_post", "s5_pre"), "xiong_fig2", ("r5n1_pre", "r5n1_mixln")
DEPTH12 = {"depth12": "", "depth12_lr": DEPTH_LR, "depth12_low": LOW_LR}  # each group as warmup_ablation's grid
RUN_IT = "scripts/device_groups.sh {name} on a lent device"


def waiting(groups: dict, names) -> str:
    """Why the groups `names` cannot be judged yet ('' when every one ran in full at its real size)."""
    why = []
    for name in names:
        group = groups.get(name)
        whole = isinstance(GROUPS.get(name), StudyGroup)  # one study's results, not a count of runs
        if group is None or not group["present"]:
            runs = "" if whole else f"0/{group['expected'] if group else '?'} runs; "
            why.append(f"{name} has not run ({runs}{RUN_IT.format(name=name)})")
        elif group["tiny"]:
            why.append(f"{name} ran at its tiny size (a test of the machinery, never judged)")
        elif group["done"] < group["expected"]:
            done = "has no results yet" if whole else f"has {group['done']}/{group['expected']} runs done"
            why.append(f"{name} {done} (cut off: the same command resumes)")
    return "; ".join(why)


def judged_runs(group: dict) -> dict:
    """The group as warmup_ablation results, every run's outcome judged now from its stored curve."""
    unigram = next((r["unigram_nll"] for r in group["runs"] if r.get("unigram_nll") is not None), None)
    results = group | {"unigram_nll": unigram}
    return relabel(results, band=THRESHOLDS["PLATEAU_BAND"].value, falling=THRESHOLDS["STILL_FALLING"].value)


def _devices(rows: list[dict]) -> str:
    kinds = sorted({f"{d.get('kind')} ({d.get('backend')}, {d.get('dtype')})" for r in rows if (d := r.get("device"))})
    return ", ".join(kinds) or "unrecorded device"


def s5_long(groups: dict) -> dict:
    """S5 at 12 layers, lr 10^-2.5, 3000 steps, warmup 0/250/500/1000, 5 seeds (groups s5_post and s5_pre).

    The folk claim (seed notes; Xiong et al. 2020 and Liu et al. 2020 show it for translation Transformers) says
    Post-LN without warmup fails at lrs Pre-LN trains at, and warmup rescues it. warmup_ablation tests it on
    the CPU at 6 and 12 layers over 600 steps with one warmup (8H = 160 steps), where Post-LN at 12 layers
    trains at no lr with or without it; these groups ask whether a longer run and longer warmups (12.5-50H) rescue
    it there. Two checks, combined: Post-LN without warmup fails on every seed where Pre-LN without warmup
    trains (contradicted when Post-LN trains; inconclusive when a cell is slow or mixed, or both fail), and, where
    Post-LN without warmup does not train, some warmup makes it train on every seed (contradicted when every
    warmup cell fails; inconclusive when none trains and some is slow or mixed).
    """
    claim = "Post-LN fails without warmup at learning rates Pre-LN tolerates (12 layers, 3000 steps)"
    if why := waiting(groups, S5_GROUPS):
        return verdict_row("S5", claim, f"waits for a device: {why}", NOT_TESTABLE, "no run of these groups to judge")
    judged = [judged_runs(groups[name]) for name in S5_GROUPS]
    rows = [r for j in judged for r in j["runs"]]
    stall = judged[0]["stall_nll"]
    warmups = sorted({r["warmup"] for r in rows})
    cells = {(p, w): runs_in(rows, placement=p, warmup=w) for p in ("post", "pre") for w in warmups}
    states = {k: cell_state(v, stall) for k, v in cells.items()}
    post0, pre0 = states[("post", 0)], states[("pre", 0)]
    if post0 == "fails" and pre0 == "trains":
        effect = Check.SUPPORTED
    else:
        effect = Check.CONTRADICTED if post0 == "trains" else Check.INCONCLUSIVE
    checks = [effect]
    rescue = [states[("post", w)] for w in warmups if w]
    if post0 != "trains" and rescue:
        checks.append(
            Check.SUPPORTED
            if "trains" in rescue
            else Check.CONTRADICTED
            if all(s == "fails" for s in rescue)
            else Check.INCONCLUSIVE
        )
    measured = "; ".join(f"{p} warmup {w}: {states[(p, w)]} ({describe(cells[(p, w)])})" for p, w in cells)
    depth, steps = rows[0]["depth"], groups[S5_GROUPS[0]]["num_steps"]
    return verdict_row(
        "S5",
        claim,
        f"L={depth}, lr {rows[0]['lr']:g}, {steps} steps on {_devices(rows)}: {measured}",
        combine(checks),
        "warmup_ablation's cell rules on the groups' runs (plateau level "
        f"{stall:.2f} nats): Post-LN without warmup fails where Pre-LN trains; where it does not train, some "
        "warmup makes it train (a slow or mixed cell is inconclusive)",
        key=f"Post-LN no warmup {post0}, Pre-LN no warmup {pre0}; Post-LN with warmup: "
        + ", ".join(f"{w} {states[('post', w)]}" for w in warmups if w),
        checks=checks,
    )


def x7_fig2(groups: dict) -> list[dict]:
    """X7 at Xiong et al.'s depth (6-6 layers) on the gettext corpus: warmup_ablation's translation rule
    (translation_verdicts.translation_verdict), one row per lr of the group (5e-4 and 1e-3, as in their Fig. 2)."""
    claim = "Post-LN without warmup fails at a learning rate where it trains with warmup; Pre-LN trains without"
    if why := waiting(groups, (FIG2_GROUP,)):
        return [verdict_row("X7", claim, f"waits for a device: {why}", NOT_TESTABLE, "no run of this group to judge")]
    judged = judged_runs(groups[FIG2_GROUP])
    out = []
    for lr in sorted({r["lr"] for r in judged["runs"]}):
        row = translation_verdict(judged, runs_in(judged["runs"], lr=lr))
        out.append(row | {"measured": f"lr {lr:g} on {_devices(judged['runs'])}: {row['measured']}"})
    return out


def _log_range(values) -> float:
    x = np.asarray(values, float)
    return float(np.log(x.max() / x.min())) if np.all(np.isfinite(x)) and np.all(x > 0) else math.nan


def _flatness(row: dict, tail: float = 0.1) -> dict:
    """One run as trained_layers' per-seed summary: the mean over the diagnostics after step 0 of ln(max/min over
    layers) of each layer's gradient norm, and the final train loss (mean of the logged losses in the last
    `tail` of the run; None when the run diverged)."""
    ranges = [_log_range(g) for step, g in row["layer_grad_norm"] if step > 0 and g is not None]
    ranges = [r for r in ranges if math.isfinite(r)]
    last = max((step for step, _ in row["train_nll"]), default=0)
    losses = [v for step, v in row["train_nll"] if v is not None and step >= (1 - tail) * last]
    failed = row["outcome"] == "diverged" or not losses
    return {
        "grad_log_range_trained": None if failed or not ranges else float(np.mean(ranges)),
        "final_loss": None if failed else float(np.mean(losses)),
    }


def r5_long(groups: dict) -> dict:
    """R5 at 24 layers over 5000 steps of 32 x 128 bytes (20M tokens; groups r5n1_pre, r5n1_mixln): trained_layers'
    rule (mixln_flatter_in_training: Mix-LN's gradient profile flatter than Pre-LN's, paired by seed) on each
    run's per-layer gradient norms. Li et al. 2024 plot them during the pre-training of 71M-7B LLaMA-like models;
    trained_layers measures them on held-out batches of a d-64 byte LM after 600 steps; here they are the
    training step's own gradients (the runs' diagnostics, 10 probes), d 128. No Post-LN group: the vs-Post-LN
    check is left out, and R5's FLATTER threshold is moved in trained_layers' sensitivity rows only."""
    claim = "Mix-LN's per-layer gradient profile during training is flatter than Pre-LN's (and Post-LN's)"
    if why := waiting(groups, R5_GROUPS):
        return verdict_row("R5", claim, f"waits for a device: {why}", NOT_TESTABLE, "no run of these groups to judge")
    judged = {name: judged_runs(groups[name]) for name in R5_GROUPS}
    runs = {name.split("_", 1)[1]: sorted(j["runs"], key=lambda r: r["seed"]) for name, j in judged.items()}
    first = runs["pre"][0]
    steps = [step for step, _ in first["layer_grad_norm"]]
    group = groups[R5_GROUPS[0]]
    results = {
        "seeds": [r["seed"] for r in runs["pre"]],
        "summary": {name: [_flatness(r) for r in rows] for name, rows in runs.items()},
        "unigram_nll": first["unigram_nll"],
        "setup": {"depth": first["depth"], "d_model": group["model"]["d_model"], "num_steps": group["num_steps"],
                  "lr": first["lr"], "schedule": group["schedule"], "optimizer": first["optimizer"],
                  "probe_steps": steps},
    }  # fmt: skip
    if [r["seed"] for r in runs["mixln"]] != results["seeds"]:
        raise ValueError(f"{R5_GROUPS} ran different seeds: the rule pairs them by seed")
    row = mixln_flatter_in_training(results)
    return row | {"measured": f"on {_devices(runs['pre'] + runs['mixln'])}: {row['measured']}", "figure": None}


def study_group_rows(groups: dict) -> list[dict]:
    """Each study group's rows for its claims, given by its study's own rules on its results (deep_training at
    d 128 over 1000 steps: the trained claims of issue 37), the scale and device named in each; one 'waits' row
    per claim while the group has not finished. The study's thresholds are moved in its own sensitivity rows
    only."""
    from normjax.studies import BY_NAME  # the registry imports this study: read at call time

    out = []
    for name, group in GROUPS.items():
        if not isinstance(group, StudyGroup) or name not in groups:
            continue
        if group.standby and not groups[name]["present"]:  # the CPU's :standard runs this study: nothing waits
            continue
        if why := waiting(groups, (name,)):
            out += [
                verdict_row(claim, f"{claim} in {group.doc}", f"waits for a device: {why}", NOT_TESTABLE,
                            "no results of this group to judge")
                for claim in group.claims
            ]  # fmt: skip
            continue
        found = groups[name]
        where = f"{name} ({', '.join(f'{k} {v}' for k, v in found['settings'].items())})"
        where += f" on {', '.join(sorted(set(found['devices']))) or 'unrecorded device'}"
        rows = [r for r in BY_NAME[group.study].verdicts(found["results"]) if r["claim"] in group.claims]
        out += [r | {"measured": f"{where}: {r['measured']}", "figure": None} for r in rows]
    return out


def depth12_runs(groups: dict) -> dict | None:
    """The depth12 groups (:standard's 12-layer cells) that finished, as one warmup_ablation results dict (each
    group's runs under its grid's name), judged now; None while depth12 itself has not finished."""
    if waiting(groups, ("depth12",)):
        return None
    done = [name for name in DEPTH12 if name in groups and not waiting(groups, (name,))]
    runs = [r | {"group": DEPTH12[name]} for name in done for r in groups[name]["runs"]]
    return judged_runs(groups["depth12"] | {"runs": runs})


def s5_depth12(groups: dict) -> list[dict]:
    """S5 at 12 layers on the depth12 groups: warmup_ablation's own S5 rule (warmup_sensitivity) on :standard's
    12-layer cells, run as accelerator groups (the groups a 150-minute :standard would move off this CPU). No
    row while depth12 is absent: the CPU's :standard runs those cells in warmup_ablation."""
    results = depth12_runs(groups)
    if results is None:
        if not groups.get("depth12", {}).get("present"):
            return []
        why = waiting(groups, ("depth12",))
        return [verdict_row("S5", "S5 at 12 layers", f"waits: {why}", NOT_TESTABLE, "depth12 has not finished")]
    row = warmup_sensitivity(results)
    others = waiting(groups, [n for n in DEPTH12 if n != "depth12"])
    where = f"12 layers, groups {', '.join(n for n in DEPTH12 if n in groups)} on {_devices(results['runs'])}"
    return [row | {"measured": f"{where}: {row['measured']}" + (f" ({others})" if others else ""), "figure": None}]


def verdicts(results: dict) -> list[dict]:
    groups = results["groups"]
    rows = [s5_long(groups)] + s5_depth12(groups) + x7_fig2(groups) + [r5_long(groups)]
    return rows + study_group_rows(groups)


def tables(results: dict) -> list[str]:
    """One line per group (what it is, what reads it, what ran where), then the answer table at 24 layers."""
    groups = results["groups"]
    lines = [
        "| group | cells | read by | runs done | device |",
        "|---|---|---|---|---|",
    ]
    for name, g in groups.items():
        state = "tiny (a test)" if g["tiny"] else f"{g['done']}/{g['expected']}"
        if GROUPS[name].standby and not g["present"]:
            state = "standby (the CPU's :standard runs these cells)"
        lines.append(
            f"| {name} | {g['doc']} | {g['read_by']} | {state} | {_devices(g['runs']) if g['runs'] else '-'} |"
        )
    answer = [n for n, g in groups.items() if n.startswith("answer24") and not waiting(groups, (n,))]
    for name in answer:
        lines += ["", f"The answer table at 24 layers ({name}):", "", *answer_table(judged_runs(groups[name]))]
    if (depth12 := depth12_runs(groups)) is not None:
        lines += ["", "The answer table at 12 layers (the depth12 groups):", "", *answer_table(depth12)]
    return lines + [""]
