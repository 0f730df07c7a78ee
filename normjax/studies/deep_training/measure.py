"""deep_training: Post-LN, DeepNorm and others trained across depth and seeds (D1-D3, S4/R4 in training, S7, R3, R6)."""

from __future__ import annotations

from tqdm import tqdm

from normjax import specs
from normjax.jacobian import fits
from normjax.studies.byte_lm import data_record
from normjax.studies.deep_training.runs import (
    data,
    early_update_run,
    final_loss,
    probe_steps,
    summarize,
    train_run,
)
from normjax.studies.seeds import seeds as seed_list
from normjax.train.tasks import unigram_nll

LN_INPUT_LARGE = 3.0  # ||x||/sqrt(d) that counts as ">> sqrt(d)" (D3's rule and the instability figure)
# A run "stalled" when its final loss is above H(p) - STALL_MARGIN, H(p) the unigram entropy of the training stream
# (3.13 nats/byte): it learnt little beyond byte frequencies. At :quick the stalled runs (Post-LN, 18 layers, lr
# 1e-3 after warmup) end at 3.12-3.30, the trained ones at 2.50-2.90 (20-step means; seed to seed about 0.1).
# Used by compute to pick S7's lr and by the S7 rule.
STALL_MARGIN = 0.15


def _by_seed(summaries: list[dict]) -> dict:
    """{"per_seed": summaries, "diverged_step": the earliest divergence over seeds (None: no seed diverged)}."""
    steps = [s["diverged_step"] for s in summaries if s["diverged_step"] is not None]
    return {"per_seed": summaries, "diverged_step": min(steps) if steps else None}


D2_RUNS = ("post", "deepnorm")  # D2 compares these two; their extra seeds (d2_num_seeds) measure the update only


def _fit_updates(config, early_update: dict) -> dict:
    """Per run and seed of D2's seeds, the power-law fit of the early update ({run: {depth: per seed}}) against
    depth."""
    out = {}
    for run, by_depth in early_update.items():
        per_seed = zip(*(by_depth[str(d)] for d in config.depths), strict=True)
        out[run] = [fits.power_law_fit(config.depths, list(u)).to_dict() for u in per_seed]
    return out


def early_updates(config, study, summary: dict, seeds: list[int]) -> dict:
    """D2's early update per run, depth and seed over seeds .. d2_num_seeds: the main runs' seeds from their
    summaries, the others from early_update_run (the same init, batches and step; only D2's part). Then, per width
    of d2_widths, every seed from early_update_run at that width ("widths": {width: {run: {depth: [...]}}})."""
    d2_seeds = seed_list(config, max(config.d2_num_seeds, len(seeds)))
    out = {"seeds": d2_seeds, "early_update": {}, "widths": {}}
    extra = [s for s in d2_seeds if s not in seeds]
    for run in (r for r in config.runs if r in D2_RUNS):
        for depth in config.depths:
            main = [rec["early_update"] for rec in summary[run][str(depth)]["per_seed"]]
            more = _early_update_runs(config, study, run, depth, extra, f"d2-{specs.parse(run).file_key}-L{depth}")
            out["early_update"].setdefault(run, {})[str(depth)] = main + more
    for width in config.d2_widths:
        wide = wider(config, width)
        for run in (r for r in config.runs if r in D2_RUNS):
            for depth in config.depths:
                key = f"d2w{width}-{specs.parse(run).file_key}-L{depth}"
                by_run = out["widths"].setdefault(str(width), {}).setdefault(run, {})
                by_run[str(depth)] = _early_update_runs(wide, study, run, depth, d2_seeds, key)
    return out


def wider(config, width: int):
    """`config` at d_model `width` and d_ff 2 x width (DeepNet Fig. 5's 64-128 ratio); heads as configured."""
    wide = config.copy_and_resolve_references()
    wide.d_model, wide.d_ff = width, 2 * width
    return wide


def _early_update_runs(config, study, run: str, depth: int, seeds: list[int], key: str) -> list[float]:
    """D2's early update of `run` at `depth` for each of `seeds` by early_update_run, cached per seed."""
    recs = [
        study.cached(f"{key}-s{s}", lambda s=s: early_update_run(config, run, depth, s))
        for s in tqdm(seeds, desc=f"deep_training D2 {key}", unit="seed", disable=not seeds)
    ]
    return [rec["early_update"] for rec in recs]


def deepnorm_vs_depth(config, study, seeds: list[int], unigram: float) -> dict:
    """S7's DeepNorm half: the largest lr of config.s7_lrs at which Post-LN trains at the shallowest s7 depth
    (every seed neither diverged nor stalled) under config.s7_warmup, then post and deepnorm at the deeper ones."""
    shallow, kind = min(config.s7_depths), config.s7_schedule
    out = {"schedule": kind, "warmup": config.s7_warmup, "num_steps": config.s7_steps, "lr": None, "candidates": {}}
    out["summary"], out["loss"] = {}, {}

    def runs(run: str, depth: int, lr: float) -> list[dict]:
        schedule = {"lr": lr, "warmup": config.s7_warmup, "num_steps": config.s7_steps, "kind": kind}
        key = f"s7-{specs.parse(run).file_key}-L{depth}-lr{lr:g}-w{config.s7_warmup}-{kind}"
        recs = [study.cached(f"{key}-s{s}", lambda s=s: train_run(config, run, depth, s, schedule)) for s in seeds]
        out["loss"].setdefault(run, {})[str(depth)] = [rec["loss"] for rec in recs]
        summaries = [
            {
                "final_loss": final_loss(rec, config.final_window),
                "diverged_step": rec["diverged_step"],
                "stream_ms_end": rec["probes"]["stream_ms"][-1],
            }
            for rec in recs
        ]
        out["summary"].setdefault(run, {})[str(depth)] = _by_seed(summaries)
        return summaries

    for lr in sorted(config.s7_lrs, reverse=True):
        summaries = runs("post", shallow, lr)
        out["candidates"][f"{lr:g}"] = [s["final_loss"] for s in summaries]
        if all(s["final_loss"] is not None and s["final_loss"] < unigram - STALL_MARGIN for s in summaries):
            out["lr"] = lr
            break
    if out["lr"] is None:
        return out
    for depth in tqdm(sorted(config.s7_depths)[1:], desc="deep_training S7", unit="depth"):
        for run in ("post", "deepnorm"):  # the rule compares both with Post-LN at the shallowest depth
            runs(run, depth, out["lr"])
    return out


def compute(config, study) -> dict:
    seeds = seed_list(config)
    jobs = sorted(
        {(d, r) for d in config.depths for r in config.runs}
        | {(d, r) for d in config.side_depths for r in config.side_runs}
    )
    setup = {
        "task": "decoder-only byte LM (stdlib .py files)",
        "lr": config.lr,
        "num_steps": config.num_steps,
        "update_lr": config.update_lr,
        "schedule": "constant, no warmup",
        "optimizer": f"{config.optimizer} ({config.b1}, {config.b2})",
        "early_steps": config.early_steps,
        "probe_steps": probe_steps(config),
        "stall_margin": STALL_MARGIN,
        "d_model": config.d_model,
    }
    unigram = unigram_nll(data(config, seeds[0])[0])  # H(p) of the training stream (every seed's order)
    results = {"setup": setup, "seeds": seeds, "data": data_record(config), "runs": {}, "summary": {}}
    results["unigram_nll"] = unigram
    for depth, run in tqdm(jobs, desc="deep_training", unit="run"):
        key = f"{specs.parse(run).file_key}-L{depth}"
        recs = [study.cached(f"{key}-s{s}", lambda r=run, d=depth, s=s: train_run(config, r, d, s)) for s in seeds]
        results["runs"].setdefault(run, {})[str(depth)] = recs
        results["summary"].setdefault(run, {})[str(depth)] = _by_seed([summarize(rec, config) for rec in recs])
    if len(config.depths) >= 2:
        results["d2"] = early_updates(config, study, results["summary"], seeds)
        results["update_fits"] = _fit_updates(config, results["d2"]["early_update"])
        results["d2"]["fits"] = {w: _fit_updates(config, by_run) for w, by_run in results["d2"]["widths"].items()}
    results["s7"] = deepnorm_vs_depth(config, study, seeds, unigram) if config.s7_depths else None  # () skips S7
    return results
