"""cost: compiled train-step time, parameter count, FLOPs and XLA memory per placement at equal size (S6)."""

from __future__ import annotations

import functools
import time

import jax
import numpy as np
from flax import nnx
from tqdm import tqdm

import normjax
from normjax import host_memory, plotting
from normjax import train as nt
from normjax.studies.seeds import seeds
from normjax.train import job

MEMORY_FIELDS = ("argument", "output", "alias", "temp")
TIME_TOLERANCE = 0.10  # S6's band for the time ratio (drawn here; its justification is in cost_verdicts)
MEMORY_TOLERANCE = 0.05  # S6's band for the compiled memory ratio


def model_config(config, placement: str) -> normjax.ModelConfig:
    """A decoder LM; layers in a Python loop for every placement (mixln needs it; one layout for all)."""
    return normjax.ModelConfig(
        arch="decoder",
        vocab_size=config.vocab_size,
        d_model=config.d_model,
        num_heads=config.num_heads,
        d_ff=config.d_ff,
        num_layers=config.num_layers,
        placement=placement,
        max_len=config.seq_len,
    )


def batch(config) -> dict:
    """Random tokens: the step's cost does not depend on their values."""
    rng = np.random.default_rng(config.seed)
    tokens_BT = rng.integers(0, config.vocab_size, (config.batch_size, config.seq_len + 1), dtype=np.int32)
    return {
        "tokens": tokens_BT[:, :-1],
        "targets": tokens_BT[:, 1:],
        "mask": np.ones((config.batch_size, config.seq_len), bool),
    }


def hparams(config) -> dict:
    """Adam at a small constant lr: every update is a real one (no divergence freeze)."""
    train = nt.TrainConfig(
        lr=1e-4,
        warmup_steps=0,
        num_steps=1,
        end_lr=1e-4,
        label_smoothing=0.0,
        divergence_loss=1e9,
        divergence_patience=1,
    )  # warmup_init_lr, weight_decay, clip_norm, decay_start: 0 (TrainConfig's defaults)
    return job.train_hparams(train, config.d_model, config.vocab_size)


def memory(compiled) -> dict:
    """XLA's compiled memory analysis in bytes; total = argument + output - alias + temp (live at once)."""
    stats = compiled.memory_analysis()
    out = {f: int(getattr(stats, f"{f}_size_in_bytes")) for f in MEMORY_FIELDS}
    return out | {"total": out["argument"] + out["output"] - out["alias"] + out["temp"]}


def flops(compiled) -> float | None:
    analysis = compiled.cost_analysis()
    analysis = analysis[0] if isinstance(analysis, list | tuple) else analysis
    return None if not analysis or "flops" not in analysis else float(analysis["flops"])


class Steps:
    """The engine's jitted train step, compiled ahead of time once per placement (lazily, so a resumed
    study whose pieces are all cached compiles nothing), then warmed up."""

    def __init__(self, config):
        self.config, self.batch = config, batch(config)

    @functools.cached_property
    def compiled(self) -> dict:
        out = {}
        for placement in tqdm(self.config.placements, desc="cost: compile", unit="placement"):
            model = normjax.Transformer(model_config(self.config, placement), rngs=nnx.Rngs(self.config.seed))
            spec = nt.StepSpec(nnx.graphdef(model), "lm", "constant")
            state = nt.init_state(spec, model, self.config.seed, hparams(self.config))
            start = time.perf_counter()
            step = nt.compiled().train.lower(spec, state, self.batch).compile()
            compile_s = time.perf_counter() - start
            num_params = sum(int(x.size) for x in jax.tree.leaves(state.params))
            for _ in range(self.config.warmup_steps):
                state, metrics = step(state, self.batch)
            jax.block_until_ready(metrics)
            out[placement] = {
                "step": step,
                "state": state,
                "static": {
                    "num_params": num_params,
                    "compile_s": compile_s,
                    "memory": memory(step),
                    "flops": flops(step),
                },
            }
        return out

    def static(self, placement: str) -> dict:
        return self.compiled[placement]["static"]

    def time_round(self, seed: int, index: int) -> dict:
        """Wall and process CPU seconds per step of every placement, in a new random order per round.

        The random order (drawn from `seed` and `index`) spreads drift over all placements; CPU time (all threads
        of this process) does not count the time other jobs on a shared machine hold the cores, so it is the
        steadier of the two.
        """
        order = np.random.default_rng([seed, index]).permutation(len(self.config.placements))
        wall, cpu = {}, {}
        for i in order:
            placement = self.config.placements[i]
            entry = self.compiled[placement]
            start, start_cpu = time.perf_counter(), time.process_time()
            for _ in range(self.config.inner_steps):
                entry["state"], metrics = entry["step"](entry["state"], self.batch)
            jax.block_until_ready(metrics)
            wall[placement] = (time.perf_counter() - start) / self.config.inner_steps
            cpu[placement] = (time.process_time() - start_cpu) / self.config.inner_steps
        return {"wall": wall, "cpu": cpu}


def _stats(seconds_SR) -> dict:
    """Seconds per step, (seeds, rounds): every round, the median and IQR over all, each seed's median."""
    seconds_SR = np.asarray(seconds_SR, float)
    q25, median, q75 = np.percentile(seconds_SR, [25, 50, 75])
    return {"s": list(seconds_SR.ravel()), "median": median, "iqr": [q25, q75], "seeds": np.median(seconds_SR, 1)}


def compute(config, study) -> dict:
    """Compiles each placement's step once (its cost does not depend on the seed), then times `repeats` rounds
    per seed; each seed is an independent timing block (its own random placement orders), so the rules get one
    time ratio per seed and an interval over seeds. Freed host memory is kept (`host_memory`) whoever calls it,
    so a placement's time is not its page faults."""
    kept = host_memory.keep_freed_memory()
    tag = "" if kept else "malloc-default-"  # pieces timed under another malloc policy are never mixed in
    steps = Steps(config)
    static = {p: study.cached(f"{tag}static-{p}", lambda p=p: steps.static(p)) for p in config.placements}
    seed_list = seeds(config)
    blocks = [(s, r) for s in seed_list for r in range(config.repeats)]
    rounds = [
        study.cached(f"{tag}round-{s}-{r}", lambda s=s, r=r: steps.time_round(s, r))
        for s, r in tqdm(blocks, desc="cost: timing rounds", unit="round")
    ]

    def per_seed(clock: str, placement: str) -> np.ndarray:
        return np.array([r[clock][placement] for r in rounds]).reshape(len(seed_list), config.repeats)

    runs = {}
    for p in config.placements:
        runs[p] = static[p] | {clock: _stats(per_seed(clock, p)) for clock in ("cpu", "wall")}
    ref = runs[config.reference]
    for run in runs.values():
        run["relative"] = {
            "time": run["cpu"]["median"] / ref["cpu"]["median"],
            "time_seeds": run["cpu"]["seeds"] / ref["cpu"]["seeds"],  # per seed: its median over its rounds
            "wall_time": run["wall"]["median"] / ref["wall"]["median"],
            "wall_time_seeds": run["wall"]["seeds"] / ref["wall"]["seeds"],
            "memory": run["memory"]["total"] / ref["memory"]["total"],
            "temp": run["memory"]["temp"] / max(ref["memory"]["temp"], 1),
            "params": run["num_params"] / ref["num_params"],
            "flops": None if run["flops"] is None or not ref["flops"] else run["flops"] / ref["flops"],
        }
    results = {
        "seeds": seed_list,
        "num_seeds": len(seed_list),
        "repeats": config.repeats,
        "reference": config.reference,
        "order": list(config.placements),
        "runs": runs,
        "size": {k: config[k] for k in ("d_model", "num_heads", "d_ff", "num_layers", "batch_size", "seq_len")},
        "device": str(jax.devices()[0]),
        "host_memory_kept": kept,
    }
    return results


def plot(results: dict, study) -> list[str]:
    from normjax.report.rules import mean_ci  # the report's intervals, drawn; measurement never reads the report

    runs, ref, names = results["runs"], results["reference"], results["order"]
    x = np.arange(len(names))
    colors = [plotting.color(p) for p in names]
    fig, axes = plotting.figure(ncols=3, width=4.6)
    ratios = [mean_ci(runs[p]["relative"]["time_seeds"]) for p in names]
    time_rel = np.array([e.mean for e in ratios])
    err = np.nan_to_num(np.array([[e.mean - e.lo, e.hi - e.mean] for e in ratios]).T)  # no interval: no bar
    axes[0].bar(x, time_rel, color=colors, yerr=err, capsize=2)
    axes[0].plot(x, [runs[p]["relative"]["wall_time"] for p in names], "kx", ms=5, label="wall-clock median")
    axes[0].set(
        ylabel=f"CPU time per step / {ref}'s",
        title=f"train step CPU time ({ref}: {1e3 * runs[ref]['cpu']['median']:.0f} ms)\n"
        f"mean over {results['num_seeds']} seeds, 95% interval",
    )
    band = (1 - TIME_TOLERANCE, 1 + TIME_TOLERANCE)
    axes[0].axhspan(*band, color="grey", alpha=0.15, label=f"S6: equal (within {TIME_TOLERANCE:.0%})")
    parts = {  # one colour per memory component; the placement is on the x axis
        "arguments (params, Adam state, batch)": "#4c72b0",
        "outputs not aliased": "#dd8452",
        "temp (activations, grads)": "#8fbf8f",
    }
    mem_KP = (
        np.array(
            [
                [runs[p]["memory"]["argument"] for p in names],
                [runs[p]["memory"]["output"] - runs[p]["memory"]["alias"] for p in names],
                [runs[p]["memory"]["temp"] for p in names],
            ]
        )
        / runs[ref]["memory"]["total"]
    )
    bottom = np.zeros(len(names))
    for (label, part_color), mem_P in zip(parts.items(), mem_KP, strict=True):
        axes[1].bar(x, mem_P, bottom=bottom, color=part_color, edgecolor="white", linewidth=0.5, label=label)
        bottom += mem_P
    memory_band = (1 - MEMORY_TOLERANCE, 1 + MEMORY_TOLERANCE)
    axes[1].axhspan(*memory_band, color="grey", alpha=0.15, label=f"S6: equal memory (within {MEMORY_TOLERANCE:.0%})")
    axes[1].set_ylim(0, 1.45 * bottom.max())  # room for the legend above the bars
    axes[1].set(
        ylabel=f"XLA memory / {ref}'s total",
        title=f"compiled step memory, stacked ({ref}: {runs[ref]['memory']['total'] / 2**20:.1f} MiB)",
    )
    ratios = []
    for key, marker in (("params", "o"), ("flops", "s")):
        values = np.array([np.nan if (v := runs[p]["relative"][key]) is None else v for p in names], float)
        axes[2].plot(x, values, marker, color="black", mfc="none", label=f"{key} / {ref}'s", ls="")
        ratios.append(values)
    ratios = np.concatenate(ratios)
    spread = np.nanmax(np.abs(ratios - 1.0), initial=0.0)
    half = max(0.15, 1.15 * spread)  # wider than the time band of S6: exact small differences look small
    axes[2].axhspan(*band, color="grey", alpha=0.15, label=f"within {TIME_TOLERANCE:.0%} (S6's time band)")
    axes[2].set_ylim(1.0 - half, 1.0 + half)
    axes[2].set(ylabel=f"ratio to {ref} (exact counts)", title="parameters and XLA FLOPs per step")
    for ax in axes:
        ax.axhline(1.0, **plotting.THEORY_STYLE, label="S6 prediction: ratio 1" if ax is not axes[1] else None)
        ax.set_xticks(x, names, rotation=60, fontsize=7)
    axes[0].legend(fontsize=6, loc="lower left")
    axes[1].legend(fontsize=6, loc="upper left", ncols=1)
    axes[2].legend(fontsize=6, loc="lower left")
    return plotting.save(fig, study.figure_stem("cost"))
