"""trained_layers: decoder-only byte LMs trained at one depth, probed per layer (R5 and N1 in training)."""

from __future__ import annotations

import math

import numpy as np
from tqdm import tqdm

from normjax import specs
from normjax.studies.byte_lm import data, data_record
from normjax.studies.seeds import seeds as seed_list
from normjax.studies.trained_layers.runs import probe_steps, train_run
from normjax.train.tasks import unigram_nll


def log_range(values) -> float:
    """ln(max / min) over layers (nan when a value is not finite or not positive)."""
    x = np.asarray(values, float)
    return float(np.log(x.max() / x.min())) if np.all(np.isfinite(x)) and np.all(x > 0) else math.nan


def summarize(rec: dict, config) -> dict:
    """One run's numbers for the rules: final loss, the gradient profile's flatness in training, block distances."""
    p = rec["probes"]
    ranges = [log_range(g) for g in p["layer_grad_norm"]]
    trained = [r for t, r in zip(p["step"], ranges, strict=True) if t > 0 and math.isfinite(r)]
    loss = np.asarray(rec["loss"], float)
    diverged = rec["diverged_step"] is not None or not np.all(np.isfinite(loss))
    return {
        "final_loss": None if diverged else float(loss[-config.final_window :].mean()),
        "diverged_step": rec["diverged_step"],
        "grad_log_range": ranges,  # per probe step
        "grad_log_range_trained": float(np.mean(trained)) if trained else None,  # mean over the probes t > 0
        "block_dev_init": rec["block_dev_init"],
        "block_dev_end": rec["block_dev_end"],
        "angular_init": p["angular"][0],
        "angular_end": p["angular"][-1] if len(p["step"]) > 1 and p["step"][-1] == config.num_steps else None,
    }


def compute(config, study) -> dict:
    seeds = seed_list(config)
    setup = {
        "task": "decoder-only byte LM (stdlib .py files)",
        "depth": config.depth,
        "d_model": config.d_model,
        "lr": config.lr,
        "warmup": config.warmup,
        "num_steps": config.num_steps,
        "schedule": f"linear warmup over {config.warmup} steps, then constant",
        "optimizer": f"{config.optimizer} ({config.b1}, {config.b2})",
        "probe_steps": probe_steps(config),
        "probe_batches": config.probe_batches,
        "jacobian_len": config.jacobian_len,
    }
    results = {
        "setup": setup,
        "seeds": seeds,
        "data": data_record(config),
        "unigram_nll": unigram_nll(data(config, seeds[0])[0]),
        "runs": {},
        "summary": {},
    }
    jobs = [(run, seed) for run in config.runs for seed in seeds]
    for run, seed in tqdm(jobs, desc="trained_layers", unit="run"):
        key = f"{specs.parse(run).file_key}-L{config.depth}-s{seed}"
        rec = study.cached(key, lambda r=run, s=seed: train_run(config, r, s))
        results["runs"].setdefault(run, []).append(rec)
        results["summary"].setdefault(run, []).append(summarize(rec, config))
    return results
