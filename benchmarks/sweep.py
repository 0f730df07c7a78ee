"""Sweep: a learning rate x warmup grid of short runs, a plain re-jitting loop vs the normjax sweep engine.

  python -m benchmarks.sweep [--lrs=5e-4,1e-3,2e-3,4e-3] [--warmups=5,10,20,40] [--steps=100] [--d_model=64]
      [--layers=2] [--modes=plain,engine,threads=2,workers=2] [--json_out=/tmp/sweep.json]

Modes (each trains every run of the grid on the same batches, one table row per mode):
  plain    benchmarks/plain_loop.py: per run a model, an optax optimizer with that run's lr / warmup baked in as
           constants and a fresh jitted step, so every run traces and compiles again.
  engine   `train.expand` + `train.run_sweep`, runs one after another: lr and warmup are traced hyperparameters,
           so all runs share one compiled train step (the engine also evaluates at steps 0 and N, and writes
           metrics.jsonl, summary.json and sweep.json with fsync).
  vmapped  the same with `vmap=True`: runs in lockstep as one vmapped step (`--modes=engine,vmapped` is the
           earlier sequential-vs-vmapped comparison).
  threads=K  the engine with `workers=K` (`parallel="threads"`): K threads of this process train every K-th run
           side by side, sharing one compiled step and XLA's CPU thread pool.
  workers=K  the engine with `workers=K, parallel="processes"`: K spawned processes, one XLA CPU thread each
           (each compiles its own step; the process start is included in the time).

The grid keeps the library defaults (Adam 0.9 / 0.98 / 1e-9, label smoothing 0.1, no dropout, no clipping, no
weight decay) and uses the "cosine" schedule (linear warmup, cosine decay to 0 at the last step), which optax's
`warmup_cosine_decay_schedule` expresses, so the plain loop can reproduce the engine's numbers: the table's last
column is the largest relative difference of any run's logged training loss from the plain loop's (float32
round-off; --log_every > 1 compares the means over the logged windows). Every warmup must be < --steps.

speedup is the first mode's wall time over this mode's. Below the table, per run: the plain loop's first step
(model init, trace, compile, one update) and its other steps; the engine's first run (the one that compiles) and
the mean of its other runs. --json_out writes the rows with these fields.
"""

import json
import tempfile
import time

import jax
import numpy as np
from absl import app, flags, logging

import normjax
from benchmarks import plain_loop
from normjax import train
from normjax.train import records
from normjax.train.config_io import default_config, sweep_axes
from normjax.train.job import prepare
from normjax.train.sweep import SweepRun

_LRS = flags.DEFINE_list("lrs", ["5e-4", "1e-3", "2e-3", "4e-3"], "Peak learning rates of the grid.")
_WARMUPS = flags.DEFINE_list("warmups", ["5", "10", "20", "40"], "Warmup steps of the grid (each < --steps).")
_STEPS = flags.DEFINE_integer("steps", 100, "Train steps per run.")
_D = flags.DEFINE_integer("d_model", 64, "Model width (heads 4, FFN 2d).")
_LAYERS = flags.DEFINE_integer("layers", 2, "Encoder and decoder layers.")
_LOG_EVERY = flags.DEFINE_integer("log_every", 1, "The engine's train.log_every (1: compare every step's loss).")
_MODES = flags.DEFINE_list(
    "modes", ["plain", "engine", "threads=2", "workers=2"], "Any of plain, engine, vmapped, threads=K, workers=K."
)
_MODE_OF = {"threads": "threads", "processes": "workers"}  # run_sweep's parallel= -> the mode's name
_JSON = flags.DEFINE_string("json_out", None, "Write the table rows as JSON here too.")


def grid() -> list[SweepRun]:
    steps = _STEPS.value
    config = default_config()
    config.model.update(d_model=_D.value, num_heads=4, d_ff=2 * _D.value, num_layers=_LAYERS.value)
    config.data.update(max_len=24, num_train=5000, num_valid=64)
    config.train.update(
        schedule="cosine",
        num_steps=steps,
        batch_size=32,
        log_every=_LOG_EVERY.value,
        eval_every=steps,
        checkpoint_every=steps,
        bleu_examples=0,
    )
    config.sweep.axes = sweep_axes(
        {"train.lr": [float(x) for x in _LRS.value], "train.warmup_steps": [int(x) for x in _WARMUPS.value]}
    )
    return train.expand(config)


def run_plain(runs) -> tuple[dict, dict]:
    """(row, {run name: per-step losses}) of the plain loop."""
    start = time.perf_counter()
    results = {r.name: plain_loop.train_run(r.run) for r in runs}
    wall = time.perf_counter() - start
    first = np.mean([p.first_step_s for p in results.values()])
    rest = np.mean([p.wall_s - p.first_step_s for p in results.values()])
    row = {
        "mode": "plain",
        "wall_s": wall,
        "compiles": sum(p.compiles for p in results.values()),
        "first_step_s_per_run": first,
        "other_steps_s_per_run": rest,
    }
    return row, {name: p.losses for name, p in results.items()}


def run_engine(runs, vmap: bool, workers: int = 1, parallel: str = "processes") -> tuple[dict, dict]:
    """(row, {run name: [(step, train/loss) of every metrics.jsonl record]}) of train.run_sweep."""
    fns = train.compiled()
    jitted = fns.vtrain if vmap else fns.train
    jitted.clear_cache()  # every mode pays its own compile, as a fresh process would
    before = jitted._cache_size()
    with tempfile.TemporaryDirectory() as workdir:
        start = time.perf_counter()
        result = train.run_sweep(runs, workdir, vmap=vmap, progress=False, workers=workers, parallel=parallel)
        wall = time.perf_counter() - start
        curves = {
            r.name: [
                (m["step"], m["train/loss"])
                for m in records.read_jsonl(f"{workdir}/{r.name}/metrics.jsonl")
                if "train/loss" in m
            ]
            for r in runs
        }
    not_ok = [f"{r['name']} ({r['summary']['outcome']})" for r in result["runs"] if r["summary"]["outcome"] != "ok"]
    if not_ok:  # a diverged run is frozen from then on, unlike the plain loop's; a stalled one trains on
        logging.warning("runs whose outcome is not ok: %s", ", ".join(not_ok))
    seconds = [r["summary"]["wall_time_s"] for r in result["runs"]]
    row = {
        "mode": "vmapped" if vmap else "engine" if workers == 1 else f"{_MODE_OF[parallel]}={workers}",
        "wall_s": wall,
        "compiles": None if parallel == "processes" and workers > 1 else jitted._cache_size() - before,
        "first_run_s": seconds[0],
        "other_runs_s": float(np.mean(seconds[1:] or seconds)),
    }
    return row, curves


def max_rel_diff(curves: dict, plain: dict) -> float:
    """Largest |engine - plain| / |plain| over every logged loss; the plain loss is averaged over the same window."""
    worst = 0.0
    for name, logged in curves.items():
        previous = 0
        for step, loss in logged:
            reference = float(np.mean(plain[name][previous:step]))
            worst = max(worst, abs(loss - reference) / abs(reference))
            previous = step
    return worst


def warm_up(run: SweepRun) -> None:
    """Pays the one-off costs (backend start, synthetic data generation, first jit) before any mode is timed."""
    prepare(run.run)
    jax.block_until_ready(jax.jit(lambda x: x + 1)(0))


def measure(runs, mode: str) -> tuple[dict, dict]:
    if mode == "plain":
        return run_plain(runs)
    for parallel, name in _MODE_OF.items():
        if mode.startswith(f"{name}="):
            return run_engine(runs, vmap=False, workers=int(mode.split("=")[1]), parallel=parallel)
    return run_engine(runs, vmap=mode == "vmapped")


_COLUMNS = ("mode", "wall_s", "steps_per_s", "compiles", "speedup", "max_rel_loss_diff")
_ROUND_OFF = 1e-4  # relative; observed differences are about 1e-6
_DETAILS = ("first_step_s_per_run", "other_steps_s_per_run", "first_run_s", "other_runs_s")


def print_table(rows: list[dict]) -> None:
    table = [_COLUMNS] + [tuple(_cell(row.get(c)) for c in _COLUMNS) for row in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(_COLUMNS))]
    for r in table:
        print("  ".join(cell.rjust(w) for cell, w in zip(r, widths, strict=True)))


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2e}" if value < 1e-2 else f"{value:.2f}"
    return str(value)


def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)
    kept = normjax.keep_freed_memory()  # for every mode alike (NORMJAX_KEEP_FREED_MEMORY=0: off)
    print(f"host memory kept (normjax.keep_freed_memory): {kept}")
    if max(int(w) for w in _WARMUPS.value) >= _STEPS.value:
        raise app.UsageError("every --warmups value must be < --steps (optax's cosine decay needs steps after it)")
    runs = grid()
    warm_up(runs[0])
    total = len(runs) * _STEPS.value
    rows, curves = [], {}
    for mode in _MODES.value:
        row, curves[mode] = measure(runs, mode)
        rows.append(
            row
            | {"host_memory_kept": kept, "runs": len(runs), "total_steps": total, "steps_per_s": total / row["wall_s"]}
        )
    for row in rows:
        row["speedup"] = rows[0]["wall_s"] / row["wall_s"]
        if row["mode"] != "plain" and "plain" in curves:
            row["max_rel_loss_diff"] = max_rel_diff(curves[row["mode"]], curves["plain"])
            if row["max_rel_loss_diff"] > _ROUND_OFF:
                logging.warning("%s: losses differ from the plain loop's by more than float32 round-off", row["mode"])
    print(
        f"{len(runs)} runs ({len(_LRS.value)} lrs x {len(_WARMUPS.value)} warmups) x {_STEPS.value} steps; "
        f"speedup = {rows[0]['mode']} wall / this wall"
    )
    print_table(rows)
    for row in rows:
        print(f"{row['mode']}: " + ", ".join(f"{k} {v:.2f}" for k, v in row.items() if k in _DETAILS))
    if _JSON.value:
        with open(_JSON.value, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    app.run(main)
