"""Verdict rules of warmup_ablation: warmup sensitivity (S5), the answer table, schedules (R7); X7 and X8 in
translation_verdicts, W1-W3 in proxy_verdicts."""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp

from normjax import train
from normjax.report import verdict_row
from normjax.report.claims import CONSTRUCTION
from normjax.report.rules import MIN_SEEDS, Check, Threshold, combine, mean_ci
from normjax.studies.grid_runs import TARGET_FRACTION
from normjax.studies.warmup_ablation import proxy_verdicts
from normjax.studies.warmup_ablation.cell_verdicts import cell_state, describe, runs_in
from normjax.studies.warmup_ablation.config import DEPTH_LR, EDGE, LOW_LR
from normjax.studies.warmup_ablation.curves import (
    MITIGATIONS,
    lm_runs,
    main_rows,
    relabel,
    sensitivity_curves,
)
from normjax.studies.warmup_ablation.translation_verdicts import iwslt_figure
from normjax.train import outcomes

THRESHOLDS = {
    **outcomes.THRESHOLDS,  # the curve-based outcome labels (PLATEAU_BAND, STILL_FALLING), recomputed when moved
    "TARGET_FRACTION": Threshold(
        TARGET_FRACTION,
        "steps-to-target counts the steps until the train nll is <= 0.8 H: an absolute level (the data's unigram "
        "entropy H, the same for every run) a tenth of H below the stall level; at quick the Pre-LN runs and "
        "Post-LN with warmup reach it in 50-140 of 150 steps, Post-LN at lr 0.01 without warmup (0.83 H) does not",
        source="convention",
    ),
    "MIN_SEEDS": Threshold(
        MIN_SEEDS,
        "a cell 'fails' only when every one of its >= 3 seeds stalled or diverged, and 'trains' only when every "
        "seed ended ok and the 95% interval of the seeds' final nll lies below the stall level; cells with mixed "
        "seeds (the failure edge, where seed-to-seed spread reached 0.5 nats in the earlier grid) decide nothing",
        source="convention",
    ),
} | proxy_verdicts.THRESHOLDS
PLAIN_GRIDS = ("depth", EDGE, LOW_LR)  # Post-LN and Pre-LN with and without warmup, beside the main grid


def critical_lrs(rows: list[dict], stall_nll: float) -> dict:
    """{placement: {depth: {"lower", "upper", "state"}}}: where the critical lr lies among the runs without warmup.

    `upper` is the smallest lr of the grid whose cell does not train ("fails" or "mixed", its `state`) above an
    lr that trains, `lower` the largest trained lr below it: the critical lr is in (lower, upper]. A cell that
    does not train with no trained lr below it may be under-training rather than instability: then `lower` is
    None and the critical lr is at or below `upper`. None for `upper`: every lr of the grid trains (or none).
    """
    out: dict = {}
    for placement in sorted({r["placement"] for r in rows}):
        for depth in sorted({r["depth"] for r in rows if r["placement"] == placement}):
            lrs = sorted({r["lr"] for r in rows if r["placement"] == placement and r["depth"] == depth})
            states = [cell_state(runs_in(rows, placement=placement, depth=depth, lr=lr), stall_nll) for lr in lrs]
            trained = [i for i, st in enumerate(states) if st == "trains"]
            bad = [i for i, st in enumerate(states) if st in ("fails", "mixed")]
            above = [i for i in bad if trained and i > trained[0]]
            upper = above[0] if above else (bad[0] if bad and not trained else None)
            lower = max((i for i in trained if upper is not None and i < upper), default=None)
            out.setdefault(placement, {})[depth] = {
                "lower": None if lower is None else lrs[lower],
                "upper": None if upper is None else lrs[upper],
                "state": None if upper is None else states[upper],
            }
    return out


def _bracket(crit: dict, lrs: list) -> str:
    if crit["upper"] is None:
        return f"above {max(lrs):g} (every lr trains)" if lrs else "no runs"
    low = f"({crit['lower']:g}, " if crit["lower"] is not None else "<= "
    return f"{low}{crit['upper']:g}{']' if crit['lower'] is not None else ''} ({crit['upper']:g}: {crit['state']})"


def _no_warmup_rows(results: dict) -> list[dict]:
    """Runs without warmup on the main grid's schedule and Adam beta2: the main, depth, depth_lr, edge and low_lr
    grids'."""
    return [r for r in results["runs"] if r["warmup"] == 0 and r.get("group", "") in ("", *PLAIN_GRIDS, DEPTH_LR)]


def _arms(results: dict, stall_nll: float) -> list[str]:
    """One line per optimizer / schedule arm of Post-LN without warmup (the Adam-variance test)."""
    out = []
    for group in ("radam", "adam999", "sgd", "constant"):
        rows = [r for r in results["runs"] if r.get("group") == group and r["placement"] == "post"]
        for arm_lr in sorted({r["lr"] for r in rows}):
            cell = runs_in(rows, lr=arm_lr, warmup=0)
            if cell:
                out.append(f"{group} lr {arm_lr:g}: {cell_state(cell, stall_nll)} ({describe(cell)})")
    return out


def warmup_sensitivity(results: dict) -> dict:
    """S5 against the absolute failure reference (stalled or diverged, from the unigram level).

    Effect: a (depth, lr) cell without warmup (main grid and depth x lr grid) where Post-LN fails on every seed
    and Pre-LN trains on every seed. Rescue: at an lr of the main grid where Post-LN does not train without
    warmup, Post-LN with the longest warmup trains.
    """
    stall = results.get("stall_nll")
    main = [r for r in main_rows(results) if r["placement"] in ("post", "pre")]
    claim = "Post-LN fails without warmup at learning rates Pre-LN tolerates"
    if stall is None or not main:
        return verdict_row(
            "S5",
            claim,
            "no stall level or no main-grid runs in these results (computed before the stalled outcome)",
            "not testable at this scale",
            "rerun the study: the rule needs the unigram level and every run's outcome",
            "heatmap.png",
        )
    cells = {(r["placement"], r["depth"], r["lr"], r["warmup"]) for r in main}
    num_seeds = min(len(runs_in(main, placement=p, depth=d, lr=lr, warmup=w)) for p, d, lr, w in cells)
    if num_seeds < MIN_SEEDS:
        return verdict_row(
            "S5",
            claim,
            f"{num_seeds} seed(s) per cell",
            "not testable at this scale",
            f"no empirical verdict from fewer than {MIN_SEEDS} seeds per cell (the presets run {MIN_SEEDS})",
            "heatmap.png",
            key=f"{num_seeds} seed(s) per cell",
        )
    no_warmup = [r for r in _no_warmup_rows(results) if r["placement"] in ("post", "pre")]
    shown, unresolved, contrary, detail = [], [], [], []
    for depth, lr in sorted({(r["depth"], r["lr"]) for r in no_warmup}):
        post, pre = (runs_in(no_warmup, placement=p, depth=depth, lr=lr) for p in ("post", "pre"))
        post_state, pre_state = cell_state(post, stall), cell_state(pre, stall)
        detail.append(
            f"L={depth} lr {lr:g} no warmup: Post-LN {post_state} ({describe(post)}), Pre-LN {pre_state} "
            f"({describe(pre)})"
        )
        if post_state == "fails" and pre_state == "trains":
            shown.append((depth, lr))
        elif post_state in ("fails", "mixed", "slow") and pre_state in ("trains", "mixed", "slow"):
            unresolved.append((depth, lr))
        if pre_state == "fails" and post_state == "trains":
            contrary.append((depth, lr))
    grid = [r for r in results["runs"] if r.get("group", "") in ("", *PLAIN_GRIDS) and r["optimizer"] == "adam"]
    longest = max(r["warmup"] for r in grid)
    rescued, tried = [], []
    for depth, lr in sorted({(r["depth"], r["lr"]) for r in grid if r["placement"] == "post"}):
        post0 = runs_in(grid, placement="post", depth=depth, lr=lr, warmup=0)
        if longest and post0 and cell_state(post0, stall) != "trains":
            post_w = runs_in(grid, placement="post", depth=depth, lr=lr, warmup=longest)
            if post_w:
                state = cell_state(post_w, stall)
                tried.append(f"L={depth} lr {lr:g}: Post-LN warmup {longest} {state} ({describe(post_w)})")
                if state == "trains":
                    rescued.append((depth, lr))
    crit = critical_lrs(no_warmup, stall)
    lrs_at = lambda p, d: sorted({r["lr"] for r in no_warmup if r["placement"] == p and r["depth"] == d})
    crit_text = "; ".join(f"{p} L={d}: {_bracket(c, lrs_at(p, d))}" for p, by in crit.items() for d, c in by.items())
    # a cell where Post-LN fails and Pre-LN trains; inconclusive where one of the two is unresolved (mixed, slow)
    effect = Check.SUPPORTED if shown else Check.INCONCLUSIVE if unresolved else Check.CONTRADICTED
    checks = [
        effect,
        Check.SUPPORTED if rescued else Check.CONTRADICTED,  # the longest warmup makes Post-LN train where it failed
        effect & (Check.CONTRADICTED if contrary else Check.SUPPORTED),  # and, where shown, never the reverse
    ]
    verdict = combine(checks)
    key = "no cell where Post-LN fails and Pre-LN trains without warmup"
    if shown:
        depth, lr = shown[0]
        post, pre = (runs_in(no_warmup, placement=p, depth=depth, lr=lr) for p in ("post", "pre"))
        key = (
            f"L={depth} lr {lr:g}, no warmup: Post-LN {describe(post)}"
            f"; Pre-LN nll {mean_ci([r['final_valid_nll'] for r in pre]).text('.2f')} < plateau level {stall:.2f}"
        )
    arms = _arms(results, stall)
    sens = sensitivity_text(results)
    where = ", ".join(f"L={d} lr {lr:g}" for d, lr in shown) or "none"
    measured = (
        f"Post-LN fails and Pre-LN trains without warmup at {where}"
        + (f"; the reverse at {', '.join(f'L={d} lr {lr:g}' for d, lr in contrary)}" if contrary else "")
        + f"; warmup {longest} rescues Post-LN at "
        + (", ".join(f"L={d} lr {lr:g}" for d, lr in rescued) if rescued else "no cell of the grid")
        + (f" ({'; '.join(tried)})" if tried else " (Post-LN trains without warmup in every cell)")
        + f". {'. '.join(detail)}. Critical lr without warmup: {crit_text}"
        + (f". Post-LN without warmup, other arms: {'; '.join(arms)}" if arms else "")
        + (f". LR sensitivity (Wortsman et al. 2023, nats): {sens}" if sens else "")
    )
    reason = (
        f"outcomes judged from each run's stored validation curve: a run fails when it diverges or stalls (ends at "
        f"the plateau level, final valid nll >= {stall:.2f} = (1 - {_t('PLATEAU_BAND'):g}) x the unigram entropy, "
        f"and fell by less than {_t('STILL_FALLING'):g} nats over the last third of the run); one at that level but "
        "still falling is slow (under-trained, not failed); a cell fails when all its seeds "
        f"(>= {MIN_SEEDS}) fail and trains when all trained with the 95% interval of their final nll below the "
        "plateau level (else slow or mixed, deciding nothing); three checks, combined: in some cell (depth, lr) "
        "Post-LN fails without warmup where Pre-LN trains (inconclusive where such a cell is slow or mixed); "
        "Post-LN with the longest warmup trains in a cell where it fails without (the same schedule after the "
        "warmup: a fair control); where the effect is shown, in no cell the reverse"
    )
    return verdict_row(
        "S5",
        claim,
        measured,
        verdict,
        reason,
        "heatmap.png",
        key=key,
        checks=checks,
        cells_showing_effect=[list(c) for c in shown],
        cells_contrary=[list(c) for c in contrary],
        cells_rescued_by_warmup=[list(c) for c in rescued],
        critical_lr={p: {str(d): c for d, c in by.items()} for p, by in crit.items()},
        stall_nll=stall,
    )


def sensitivities(results: dict) -> dict:
    """{(group, placement, depth, warmup, optimizer): Estimate of the LR sensitivity over seeds}."""
    by: dict = {}
    for c in sensitivity_curves(results):
        if c["sensitivity"] is not None:
            by.setdefault((c["group"], c["placement"], c["depth"], c["warmup"], c["optimizer"]), []).append(c)
    return {k: mean_ci([c["sensitivity"] for c in v]) for k, v in sorted(by.items(), key=str)}


def arm_name(placement: str, group: str) -> str:
    """A placement, or a placement with a mitigation arm's model change ("pre +qk_norm")."""
    return placement + (f" +{group}" if group in MITIGATIONS else "")


def sensitivity_text(results: dict) -> str:
    return "; ".join(
        f"{arm_name(p, g)} L={d} {'warmup ' + str(w) if w else 'no warmup'}{'' if o == 'adam' else ' ' + o}: "
        f"{e.text('.2f')}"
        for (g, p, d, w, o), e in sensitivities(results).items()
    )


def _steps(rows: list[dict], warmup: int, lrs: list[float]) -> str:
    """Mean steps to the target at the largest lr of `lrs` (how many seeds reached it), or '-'."""
    cell = runs_in(rows, warmup=warmup, lr=lrs[-1]) if lrs else []
    got = [r["steps_to_target"] for r in cell if r.get("steps_to_target") is not None]
    return f"{mean_ci(got).mean:.0f} ({len(got)}/{len(cell)})" if got else "-"


FAILED_BEST = " (no lr trains: the gap to a failed best)"  # Wortsman's metric is relative to the curve's best


def answer_table(results: dict) -> list[str]:
    """The practitioner's table: per depth and placement, the lrs of the grid that train (every seed) without
    warmup and with the best warmup, the LR sensitivity of each, and the steps to the common target."""
    stall = results.get("stall_nll")
    if stall is None or not all("init_valid_nll" in r for r in results["runs"]):
        return []
    runs = [r for r in lm_runs(results) if r["optimizer"] == "adam"]
    sens = sensitivities(results)
    lines = [
        f"Measured at {results['model'].get('d_model')}-wide {results['data_task']} models, "
        f"{results['num_steps']} steps, Adam beta2 {results.get('b2')}, schedule {results['schedule']} "
        f"(decay from step {results.get('decay_start')} for every arm); a cell trains when every seed trained "
        f"(outcomes judged from the stored curves) with its final nll interval below the plateau level "
        f"{stall:.2f} nats.",
        "",
        "| depth | placement | lrs that train, no warmup | best warmup | lrs that train with it | LR sensitivity "
        "no warmup / best warmup | steps to target (no warmup / warmup, at the best lr) |",
        "|---|---|---|---|---|---|---|",
    ]
    arm = lambda r: arm_name(r["placement"], r.get("group", ""))
    for depth, placement in sorted({(r["depth"], arm(r)) for r in runs}):
        own = [r for r in runs if (r["depth"], arm(r)) == (depth, placement)]
        trains = {w: _training_lrs(own, w, stall) for w in sorted({r["warmup"] for r in own})}
        best = max(trains, key=lambda w: (trains[w].judged, len(trains[w].lrs), w))  # judged arms first
        adam = {(arm_name(p, g), d, w): e for (g, p, d, w, o), e in reversed(sens.items()) if o == "adam"}
        s0, sb = adam.get((placement, depth, 0)), adam.get((placement, depth, best))
        text = lambda e, arm: (e.text(".2f") + (FAILED_BEST if arm.judged and not arm.lrs else "")) if e else "-"
        no_warmup, with_best = trains.get(0, Training([], "not run", False)), trains[best]
        if set(trains) == {0}:
            with_cells = "no warmup arm | - | " + text(s0, no_warmup) + " / - | " + _steps(own, 0, no_warmup.lrs)
            with_cells += " / -"
        else:
            with_cells = (
                f"{best} | {with_best.text} | {text(s0, no_warmup)} / {text(sb, with_best)} | "
                f"{_steps(own, 0, no_warmup.lrs)} / {_steps(own, best, with_best.lrs)}"
            )
        lines.append(f"| {depth} | {placement} | {no_warmup.text} | {with_cells} |")
    return lines + [""]


class Training(NamedTuple):
    """The lrs at which an arm trains with one warmup, their text, and whether its cells were judged."""

    lrs: list[float]
    text: str
    judged: bool


def _training_lrs(rows: list[dict], warmup: int, stall: float) -> Training:
    """Cells of >= MIN_SEEDS seeds are judged by cell_state; an arm run on fewer seeds (a curve, not judged)
    lists the lrs where every run ended ok, marked as such (as are such lrs beside judged ones), so that 'none'
    always means every cell was judged and none trains."""
    lrs = sorted({r["lr"] for r in rows if r["warmup"] == warmup})
    seeds = {lr: len({r["seed"] for r in runs_in(rows, lr=lr, warmup=warmup)}) for lr in lrs}
    few = [lr for lr in lrs if seeds[lr] < MIN_SEEDS]
    ok = [lr for lr in few if all(r["outcome"] == "trained" for r in runs_in(rows, lr=lr, warmup=warmup))]
    runs = "/".join(sorted({str(seeds[lr]) for lr in few}))
    seed_text = f"{runs} seed{'s' if runs != '1' else ''}"
    note = f"{seed_text}: every run trained, not judged"
    text = lambda lrs: ", ".join(f"{lr:g}" for lr in lrs)
    if len(few) == len(lrs):  # no lr where every run trained: said so, never 'none' (a judged word)
        return Training(ok, f"{text(ok)} ({note})" if ok else f"no run trained ({seed_text}, not judged)", False)
    judged = [lr for lr in lrs if cell_state(runs_in(rows, lr=lr, warmup=warmup), stall) == "trains"]
    return Training(judged, (text(judged) or "none") + (f"; {text(ok)} ({note})" if ok else ""), True)


def schedules() -> dict:
    """R7, a check of the schedule formulas (verified by construction when it passes)."""
    hp = {k: jnp.asarray(0.0, jnp.float32) for k in train.HPARAMS} | {
        "lr": jnp.asarray(1.0),
        "warmup_steps": jnp.asarray(4000.0),
        "d_model": jnp.asarray(512.0),
        "warmup_init_lr": jnp.asarray(1e-7),
    }
    steps = jnp.arange(1, 12001)
    noam = jnp.stack([train.learning_rate("noam", s, hp) for s in (3999, 4000, 4001)])
    peak = float(train.learning_rate("noam", 4000, hp))
    curve = train.learning_rate("noam", steps, hp)
    argmax = int(steps[int(jnp.argmax(curve))])
    inv = hp | {"lr": jnp.asarray(5e-4)}
    start = float(train.learning_rate("inverse_sqrt", 0, inv))
    ok = abs(peak - 6.988e-4) < 1e-6 and argmax == 4000 and abs(start - 1e-7) < 1e-12
    return verdict_row(
        "R7",
        "Noam peak 6.988e-4 at step 4000 (d 512); fairseq inverse_sqrt starts at warmup_init_lr",
        f"Noam peak {peak:.4e} at step {argmax} (neighbours {float(noam[0]):.4e}, {float(noam[2]):.4e}); "
        f"inverse_sqrt lr at step 0 = {start:.1e}",
        CONSTRUCTION if ok else "does not hold",
        "rule: |peak - 6.988e-4| < 1e-6, argmax = 4000, inverse_sqrt(0) = warmup_init_lr (a check of the formulas)",
        None,
        key=f"Noam peak {peak:.4e} at step {argmax}",
        noam_peak=peak,
        noam_argmax=argmax,
    )


def _t(name: str) -> float:
    return THRESHOLDS[name].value


def judged(results: dict) -> dict:
    """`results` with every run's outcome judged now from its stored curve, at the current thresholds."""
    return relabel(results, band=_t("PLATEAU_BAND"), falling=_t("STILL_FALLING"))


def tables(results: dict) -> list[str]:
    """The answer table, shown in the report's warmup_ablation section (normjax.studies.study.Study.tables)."""
    return answer_table(judged(results))


lead = tables  # the answer table also opens REPORT.md (Study.lead): which placement trains at which depth and lr


def verdicts(results: dict) -> list[dict]:
    results = judged(results)
    rows = [warmup_sensitivity(results)] + iwslt_figure(results) + [schedules()]
    return rows + proxy_verdicts.verdicts(results, THRESHOLDS)
