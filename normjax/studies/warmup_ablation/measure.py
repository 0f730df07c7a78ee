"""warmup_ablation: learning-rate sensitivity curves with and without warmup per placement and depth (S5, X7)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform

import jax
import numpy as np

from normjax import plotting, train
from normjax.studies.warmup_ablation import runs_code
from normjax.studies.warmup_ablation.config import DEPTH_LR, EDGE, OLMO2, QK_NORM, SIDE_SEEDS, TRANSLATION, Z_LOSS
from normjax.train import data_text, records
from normjax.train.outcomes import STALL_FRACTION, stall_level

# steps-to-target: the first logged step whose train nll is <= TARGET_FRACTION x H (H the unigram entropy),
# an absolute target (a property of the data, the same for every run), clearly below the stall level 0.9 H.
TARGET_FRACTION = 0.80
FAILED = ("stalled", "diverged")
MITIGATIONS = (QK_NORM, Z_LOSS, OLMO2)  # grids whose model differs from their placement's plain one


def run_grid(config, folder: str, shard: tuple[int, int] = (0, 1), progress: bool = True, force: bool = False) -> dict:
    """Runs (a shard of) the sweep and its sub-grids into `folder`; finished runs are skipped, unfinished ones
    resume, runs trained by other training code are trained again (runs_code)."""
    runs = train.expand(config, jax.device_count())
    runs_code.drop_runs_of_other_code(folder, [r.name for r in runs])
    return train.run_sweep(
        runs,
        folder,
        shard,
        force=force,
        vmap=config.sweep.vmap,
        progress=progress,
        workers=config.sweep.workers,
        parallel=config.sweep.parallel,
    )


def _curve(folder: str, name: str, key: str) -> list[list[float]]:
    """[[step, value], ...] of one metric from a run's metrics.jsonl (None where non-finite)."""
    return [
        [r["step"], r.get(key)] for r in records.read_jsonl(os.path.join(folder, name, "metrics.jsonl")) if key in r
    ]


def _ratio_curve(folder: str, name: str) -> list[list[float]]:
    """[[step, ||update|| / ||params||], ...]: the relative size of each logged update."""
    rows = records.read_jsonl(os.path.join(folder, name, "metrics.jsonl"))
    return [
        [r["step"], r["train/update_norm"] / r["train/param_norm"]]
        for r in rows
        if r.get("train/update_norm") is not None and r.get("train/param_norm")
    ]


def steps_to(curve: list, target: float) -> int | None:
    """The first step of `curve` ([[step, value], ...]) at or below `target`; None if never."""
    return next((step for step, v in curve if v is not None and v <= target), None)


def summarize_runs(config, sweep: dict, folder: str) -> list[dict]:
    """One row per run: its grid, settings (from its config, not only its overrides), outcome, final metrics,
    curves and steps to the absolute target TARGET_FRACTION x H."""
    by_name = {r.name: r for r in train.expand(config, jax.device_count())}
    rows = []
    for entry in sweep["runs"]:
        summary, run = entry["summary"] or {}, by_name[entry["name"]].run
        final, unigram = summary.get("final", {}), summary.get("unigram_nll")
        train_nll = _curve(folder, entry["name"], "train/nll")
        valid_nll = _curve(folder, entry["name"], "valid/nll")
        rows.append(
            {
                "name": entry["name"],
                "group": entry.get("group", ""),
                "placement": run.model["placement"],
                "depth": run.model["num_layers"],
                "lr": run.train.lr,
                "warmup": run.train.warmup_steps,
                "seed": run.train.seed,
                "schedule": run.train.schedule,
                "optimizer": run.train.optimizer,
                "b2": run.train.b2,
                "outcome": summary.get("outcome", entry["status"]),
                "diverged_step": summary.get("diverged_step"),
                "unigram_nll": unigram,
                "final_valid_nll": final.get("valid/nll"),
                "task": run.data.task,
                "data": summary.get("data"),
                "stall_nll": summary.get("stall_nll"),
                "final_valid_bleu": final.get("valid/bleu"),
                "final_test_bleu": final.get("test/bleu"),
                "train_nll": train_nll,
                "valid_nll": valid_nll,
                "norm_input_rms": _curve(folder, entry["name"], "diag/norm_input_rms/decoder"),
                "ln_input_rms": _curve(folder, entry["name"], "diag/ln_input_rms/decoder"),
                "attn_logit_max": _curve(folder, entry["name"], "diag/attn_logit_max/decoder"),
                "output_logit_max": _curve(folder, entry["name"], "diag/output_logit_max"),
                "output_logit_mean": _curve(folder, entry["name"], "diag/output_logit_mean"),
                "layer_grad_norm": _curve(folder, entry["name"], "diag/grad_norm/decoder"),
                "update_ratio": _ratio_curve(folder, entry["name"]),
                "init_valid_nll": next((v for step, v in valid_nll if step == 0), None),
                "steps_to_target": None if unigram is None else steps_to(train_nll, TARGET_FRACTION * unigram),
            }
        )
    return rows


def lm_runs(results: dict) -> list[dict]:
    """The language-model runs: every run but the translation arm's (another task, another unigram level)."""
    return [r for r in results["runs"] if r.get("group") != TRANSLATION]


def translation_runs(results: dict) -> list[dict]:
    return [r for r in results["runs"] if r.get("group") == TRANSLATION]


def data_record(config) -> dict:
    """What names the data: the sha256 of the exact bytes (bytes_lm) or the task and path, with Python's version."""
    if config.data.task == "bytes_lm":
        return {"task": "bytes_lm"} | data_text.byte_corpus_record(
            config.data.path, config.data.suffix, config.data.max_bytes
        )
    return {"task": config.data.task, "path": config.data.path, "python_version": platform.python_version()}


def compute(config, study) -> dict:
    sweep = run_grid(config, study.path)
    runs = summarize_runs(config, sweep, study.path)
    lm = lm_runs({"runs": runs})
    unigram = next((r["unigram_nll"] for r in lm if r["unigram_nll"] is not None), None)  # a property of the data
    translation = [r for r in runs if r["group"] == TRANSLATION]
    return {
        "runs": runs,
        "model": dict(config.model),
        "data_task": config.data.task,
        "data": data_record(config),
        "num_steps": config.train.num_steps,
        "schedule": config.train.schedule,
        "decay_start": config.train.decay_start,
        "b2": config.train.b2,
        "unigram_nll": unigram,
        "stall_nll": None if unigram is None else stall_level(unigram),
        "stall_fraction": STALL_FRACTION,
        "target_nll": None if unigram is None else TARGET_FRACTION * unigram,
        "target_fraction": TARGET_FRACTION,
        "translation": translation_record(config, translation, study.path),
    }


MANIFEST_COPY = "gettext_manifest.json"  # the corpus manifest beside results.json (catalogs and their sha256)


def translation_record(config, runs: list[dict], folder: str) -> dict | None:
    """The translation arm's settings and the corpus it read (from the runs' summaries); the corpus manifest is
    copied to FOLDER/gettext_manifest.json after checking its sha256 against the one every run recorded."""
    if not runs:
        return None
    axes = {k: list(v) for k, v in config.sweep.grids[TRANSLATION].items()}
    corpora = {json_key(r["data"]) for r in runs}
    if len(corpora) != 1:  # every run of the arm must have read one corpus
        raise ValueError(f"the translation runs read {len(corpora)} different corpora: {sorted(corpora)}")
    data = runs[0]["data"]
    with open(os.path.join(data["path"], "manifest.json"), "rb") as f:
        raw = f.read()
    if hashlib.sha256(raw).hexdigest() != data["manifest_sha256"]:
        raise ValueError(f"{data['path']}/manifest.json changed since the translation runs read it (sha256 differs)")
    with open(os.path.join(folder, MANIFEST_COPY), "wb") as f:
        f.write(raw)
    return {"axes": axes, "data": data, "manifest": MANIFEST_COPY}


def json_key(value) -> str:
    return json.dumps(value, sort_keys=True)


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
    for (group, placement, depth, warmup, optimizer, seed), rows in sorted(curves.items(), key=str):
        if group == EDGE or group.startswith(SIDE_SEEDS):  # extra seeds of some cells: no curve of their own
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


def _grid(rows, placement):
    """(lrs, warmups, mean final nll, text per cell) of one placement, averaged over seeds."""
    lrs = sorted({r["lr"] for r in rows})
    warmups = sorted({r["warmup"] for r in rows})
    nll = np.full((len(lrs), len(warmups)), np.nan)
    text = np.full(nll.shape, "", dtype=object)
    for i, lr in enumerate(lrs):
        for j, w in enumerate(warmups):
            cell = [r for r in rows if r["placement"] == placement and r["lr"] == lr and r["warmup"] == w]
            finals = [r["final_valid_nll"] for r in cell if r["outcome"] != "diverged" and r["final_valid_nll"]]
            nll[i, j] = np.mean(finals) if finals else np.nan
            counts = {o: sum(r["outcome"] == o for r in cell) for o in FAILED}
            marks = " ".join(f"{n}{o[:3]}" for o, n in counts.items() if n)
            text[i, j] = ("-" if np.isnan(nll[i, j]) else f"{nll[i, j]:.2f}") + (f"\n{marks}" if marks else "")
    return lrs, warmups, nll, text


def plot(results: dict, study) -> list[str]:
    rows = main_rows(results) or results["runs"]
    placements = sorted({r["placement"] for r in rows})
    lrs = sorted({r["lr"] for r in rows})
    fig, axes = plotting.figure(ncols=len(placements), nrows=len(lrs), width=3.6, height=2.6)
    warmups = sorted({r["warmup"] for r in rows})
    shades = dict(zip(warmups, np.linspace(1.0, 0.35, len(warmups)), strict=True))
    labelled = set()
    for r in rows:
        ax = axes[lrs.index(r["lr"]) * len(placements) + placements.index(r["placement"])]
        steps, values = zip(*r["train_nll"], strict=True) if r["train_nll"] else ((), ())
        label = f"warmup {r['warmup']}" if (id(ax), r["warmup"]) not in labelled else None
        labelled.add((id(ax), r["warmup"]))
        style = {"linestyle": "--"} if r["outcome"] in FAILED else {}
        ax.plot(
            steps,
            [np.nan if v is None else v for v in values],
            color=plotting.color(r["placement"]),
            alpha=shades[r["warmup"]],
            label=label,
            **style,
        )
        ax.set(title=f"{r['placement']}, lr {r['lr']:g}", xlabel="step", ylabel="train nll")
    for ax in axes:
        plotting.mark_unigram(ax, results)
        ax.legend(fontsize=6, title="dashed: stalled/diverged", title_fontsize=6)
    paths = plotting.save(fig, study.figure_stem("loss_curves"))
    fig, axes = plotting.figure(ncols=len(placements), width=3.6, height=3.0)
    finals = [r["final_valid_nll"] for r in rows if r["final_valid_nll"] is not None]
    vmin, vmax = (min(finals), max(finals)) if finals else (0.0, 1.0)  # one colour scale for every panel
    for ax, placement in zip(axes, placements, strict=True):
        lrs_, warmups_, nll, text = _grid(rows, placement)
        image = ax.imshow(nll, cmap="viridis_r", aspect="auto", vmin=vmin, vmax=vmax)
        for i in range(len(lrs_)):
            for j in range(len(warmups_)):
                light = np.isfinite(nll[i, j]) and nll[i, j] < (vmin + vmax) / 2
                ax.text(j, i, text[i, j], ha="center", va="center", color="black" if light else "white", fontsize=7)
        ax.set(
            title=f"{placement}: final valid nll (seed mean)",
            xticks=range(len(warmups_)),
            yticks=range(len(lrs_)),
            xticklabels=warmups_,
            yticklabels=[f"{lr:g}" for lr in lrs_],
            xlabel="warmup steps",
            ylabel="peak lr",
        )
        ax.grid(False)
        bar = fig.colorbar(image, ax=ax, shrink=0.8)
        if results.get("unigram_nll") is not None:  # the unigram level and the stall level on the colour scale
            bar.ax.axhline(results["unigram_nll"], **plotting.UNIGRAM_STYLE)
            if results.get("stall_nll") is not None:
                bar.ax.axhline(results["stall_nll"], **plotting.STALL_STYLE)
    if results.get("unigram_nll") is not None:
        stall = results.get("stall_nll")
        fig.suptitle(
            f"unigram level H = {results['unigram_nll']:.2f} nats per token (dotted); "
            + ("no stall level in these results" if stall is None else f"cells at or above {stall:.2f} stalled")
            + "; Nsta / Ndiv: seeds stalled / diverged",
            fontsize=7,
        )
    paths += plotting.save(fig, study.figure_stem("heatmap"))
    if all("group" in r for r in results["runs"]):  # results from before the arms existed have no such cells
        paths += _plot_no_warmup(results, study)
    if all("init_valid_nll" in r for r in results["runs"]):  # results from before the lr curves have none
        paths += _plot_sensitivity(results, study) + _plot_failure(results, study)
    if translation_runs(results):
        paths += _plot_translation(results, study)
    return paths


def _plot_translation(results: dict, study) -> list[str]:
    """The translation arm: valid nll against steps, one panel per placement, one line per run (dashed without
    warmup), its final test BLEU in the legend; the unigram level of the target tokens dotted."""
    rows = translation_runs(results)
    placements = sorted({r["placement"] for r in rows})
    fig, axes = plotting.figure(ncols=len(placements), width=4.0, height=3.0)
    for ax, placement in zip(axes, placements, strict=True):
        for r in sorted((r for r in rows if r["placement"] == placement), key=lambda r: (r["warmup"], r["seed"])):
            if not r["valid_nll"]:
                continue
            steps, values = zip(*r["valid_nll"], strict=True)
            bleu = r.get("final_test_bleu")
            label = f"warmup {r['warmup']}, seed {r['seed']}: {r['outcome']}" + (
                "" if bleu is None else f", BLEU {bleu:.1f}"
            )
            style = "--" if r["warmup"] == 0 else "-"
            ax.plot(steps, [np.nan if v is None else v for v in values], style, label=label, marker="o", ms=3,
                    color=plotting.color(placement), alpha=1.0 if r["warmup"] else 0.6)  # fmt: skip
        unigram = next((r["unigram_nll"] for r in rows if r.get("unigram_nll")), None)
        if unigram:
            ax.axhline(unigram, **plotting.UNIGRAM_STYLE)
        ax.set(title=f"{placement}: gettext De->En", xlabel="step", ylabel="valid nll (BPE tokens)")
        ax.legend(fontsize=5)
    return plotting.save(fig, study.figure_stem("translation"))


def _curve_label(c: dict) -> str:
    """A curve's legend: placement, warmup, optimizer, and the mitigation arm's grid (it changes the model)."""
    warm = f"warmup {c['warmup']}" if c["warmup"] else "no warmup"
    label = f"{c['placement']}, {warm}" + (f", {c['optimizer']}" if c["optimizer"] != "adam" else "")
    return label + (f" +{c['group']}" if c["group"] in MITIGATIONS else "")


def _plot_sensitivity(results: dict, study) -> list[str]:
    """Final valid nll against peak lr (Wortsman et al. 2023's Fig. 1 axes), one panel per depth: the seeds'
    mean of min(final, init) (a failed run at the init loss) with their range, dashed without warmup."""
    curves = sensitivity_curves(results)
    if not curves:  # one lr per cell (e.g. an override of train.lr): no curve to draw
        return []
    depths = sorted({c["depth"] for c in curves})
    fig, axes = plotting.figure(ncols=len(depths), width=4.4, height=3.4)
    for ax, depth in zip(axes, depths, strict=True):
        groups: dict = {}
        for c in (c for c in curves if c["depth"] == depth):
            groups.setdefault(_curve_label(c), []).append(c)
        for label, seeds in sorted(groups.items()):
            lrs = seeds[0]["lrs"]
            capped = np.array(
                [
                    [c["init_nll"] if v is None else min(v, c["init_nll"]) for v in c["final"]]
                    for c in seeds
                    if c["lrs"] == lrs
                ]
            )
            first = seeds[0]
            style = dict(linestyle="--" if first["warmup"] == 0 else "-", marker="o", ms=3)
            mean = capped.mean(0)
            ax.errorbar(
                lrs, mean, yerr=[mean - capped.min(0), capped.max(0) - mean], color=plotting.color(first["placement"]),
                label=label, capsize=2, alpha=0.85 if first["warmup"] else 0.6, **style,
            )  # fmt: skip
        ax.set_xscale("log")
        ax.set(xlabel="peak learning rate", ylabel="final valid nll (failed run: init loss)", title=f"{depth} layers")
        plotting.mark_unigram(ax, results)
        plotting.legend_outside(ax)
    fig.suptitle("lr sensitivity curves (as Wortsman et al. 2023, Fig. 1): seed mean and range", fontsize=8)
    return plotting.save(fig, study.figure_stem("lr_sensitivity"))


def failure_pair(results: dict) -> tuple[dict, dict] | None:
    """(failed, healthy): Post-LN without warmup that stalled or diverged, and the same lr, depth and seed with the
    longest warmup that trained (the lowest such lr), or None."""
    runs = [r for r in lm_runs(results) if r["placement"] == "post" and r["optimizer"] == "adam"]
    longest = max((r["warmup"] for r in runs), default=0)
    for r in sorted(runs, key=lambda r: (r["lr"], r["depth"], r["seed"])):
        if r["warmup"] == 0 and r["outcome"] in FAILED:
            twin = [
                w for w in runs
                if w["warmup"] == longest > 0 and w["outcome"] == "ok"
                and (w["lr"], w["depth"], w["seed"], w.get("group")) == (r["lr"], r["depth"], r["seed"], r.get("group"))
            ]  # fmt: skip
            if twin:
                return r, twin[0]
    return None


def _plot_failure(results: dict, study) -> list[str]:
    """A failed Post-LN run next to the same run with warmup: train nll, the largest LN-input rms, the first
    layer's gradient norm over the last layer's, and the update-to-parameter ratio, against steps."""
    pair = failure_pair(results)
    if pair is None:
        return []
    fig, axes = plotting.figure(ncols=4, width=3.4, height=2.8)
    for r, style in zip(pair, ("--", "-"), strict=True):
        label = f"warmup {r['warmup']}: {r['outcome']}"
        color = plotting.color(r["placement"])
        for ax, curve in zip(axes, (r["train_nll"], r["norm_input_rms"], None, r["update_ratio"]), strict=True):
            if curve is None:  # the gradient ratio from the per-layer norms
                curve = [[s, g[0] / g[-1]] for s, g in r["layer_grad_norm"] if g and g[-1]]
            if curve:
                steps, values = zip(*curve, strict=True)
                ax.plot(steps, [np.nan if v is None else v for v in values], style, color=color, label=label)
    titles = ("train nll", "largest LN-input rms", "grad norm: layer 0 / last", "||update|| / ||params||")
    for ax, title in zip(axes, titles, strict=True):
        ax.set(title=title, xlabel="step")
        ax.legend(fontsize=6)
    for ax in axes[1:]:
        ax.set_yscale("log")
    plotting.mark_unigram(axes[0], results)
    failed = pair[0]
    fig.suptitle(f"Post-LN, {failed['depth']} layers, lr {failed['lr']:g}, seed {failed['seed']}", fontsize=8)
    return plotting.save(fig, study.figure_stem("failure"))


def _arm(r: dict) -> str:
    """The label of a run's no-warmup cell: its grid (or the main grid's schedule), depth and lr."""
    return f"{r.get('group') or 'main'}\nL={r['depth']} lr {r['lr']:g}"


def _plot_no_warmup(results: dict, study) -> list[str]:
    """Every cell without warmup (depth x lr, schedule and optimizer arms): one dot per seed, failed runs hollow,
    against the unigram and stall levels."""
    rows = [r for r in lm_runs(results) if r["warmup"] == 0]
    placements = sorted({r["placement"] for r in rows})
    fig, axes = plotting.figure(ncols=len(placements), width=max(4.0, 0.55 * len({_arm(r) for r in rows})), height=3)
    for ax, placement in zip(axes, placements, strict=True):
        own = [r for r in rows if r["placement"] == placement]
        arms = sorted({_arm(r) for r in own})
        for r in own:
            nll = r["final_valid_nll"] if r["outcome"] != "diverged" and r["final_valid_nll"] else np.nan
            failed = r["outcome"] in FAILED
            color = plotting.color(placement)
            x = arms.index(_arm(r)) + 0.08 * (r["seed"] % 3 - 1)
            ax.plot(x, nll, "o", mfc="none" if failed else color, mec=color, ms=5)
            if r["outcome"] == "diverged":
                ax.annotate("div", (x, results.get("unigram_nll") or 0), fontsize=6, ha="center")
        plotting.mark_unigram(ax, results)
        ax.set_xticks(range(len(arms)), arms, fontsize=6)
        ax.set(title=f"{placement}, no warmup: final valid nll per seed (hollow: stalled/diverged)", ylabel="nll")
        ax.title.set_fontsize(8)
        ax.legend(fontsize=6)
    return plotting.save(fig, study.figure_stem("no_warmup"))
