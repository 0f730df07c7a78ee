"""A grid as one program vs one run per worker process: compiles and runs per CPU-hour, side by side in one run.

  python -m benchmarks.grid_program [--runs=4] [--steps=60] [--cache=off]

The cell: warmup_ablation's :standard byte LM (6 layers, d 128, FFN 256, batch 8 x 64 bytes, Adam 0.9/0.95, its
eval, diagnostics and checkpoints at the preset's fractions of the run), `--runs` runs that differ in lr and
warmup. Each mode trains the same runs from scratch in a fresh process (start-up, data, compiles and training all
counted), with JAX's compile log on:
  processes  today's :standard path: run_sweep(workers=2, parallel="processes"), one spawned worker process per
             core, each training its share of the runs one after another (vmap off);
  vmapped    run_sweep(vmap=True, workers=1): the runs in lockstep as one compiled program per structure.
Prints one table: wall s, CPU s (the process and its children), compiles (all XLA programs; and the train steps),
runs per CPU-hour and per wall hour. --cache=off (default) measures cold compiles; --cache=on lets each mode read
the persistent cache that an earlier mode (or run) wrote.
"""

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time

MODES = {"processes": dict(vmap=False, workers=2, parallel="processes"), "vmapped": dict(vmap=True, workers=1)}


def cell_config(runs: int, steps: int):
    """warmup_ablation's :standard config cut to `runs` runs of `steps` steps (lr x warmup), no sub-grids."""
    from normjax.studies.warmup_ablation import config as study_config
    from normjax.train.config_io import sweep_axes

    config = study_config.get_config("standard")
    lrs = [1e-3, 10**-2.5, 1e-2, 10**-3.5][: max(1, runs // 2)]
    config.sweep.axes = sweep_axes({"train.lr": lrs, "train.warmup_steps": [0, steps // 3][: min(2, runs)]})
    config.sweep.grids = {}
    config.train.update(
        num_steps=steps, log_every=steps // 30, eval_every=steps // 3, checkpoint_every=steps // 3,
        diag_every=steps // 10,
    )  # fmt: skip
    return config


def train(mode: str, runs: int, steps: int, workdir: str) -> None:
    """One mode, in this process (the child the parent times)."""
    from normjax.train.sweep import expand, run_sweep

    config = cell_config(runs, steps)
    run_sweep(expand(config), workdir, progress=False, **MODES[mode])


def measure(mode: str, runs: int, steps: int, cache: str) -> dict:
    """Runs `mode` in a fresh process; its wall time, CPU time (with its worker processes) and compile counts."""
    env = os.environ | {"JAX_LOG_COMPILES": "1", "JAX_PLATFORMS": "cpu"}
    if cache == "off":
        env["NORMJAX_COMPILATION_CACHE"] = "off"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryDirectory() as workdir:
        t0 = time.time()
        cmd = [sys.executable, "-m", "benchmarks.grid_program", f"--child={mode}", f"--runs={runs}", f"--steps={steps}"]
        proc = subprocess.run([*cmd, f"--workdir={workdir}"], env=env, capture_output=True, text=True)
        wall = time.time() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise RuntimeError(f"{mode} failed:\n{proc.stderr[-3000:]}")
    compiles = re.findall(r"Compiling (\S+) with global shapes", proc.stderr)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "mode": mode,
        "wall_s": wall,
        "cpu_s": cpu,
        "compiles": len(compiles),
        "train_step_compiles": sum(name in ("jit(train_step)", "jit(vmapped_train_step)") for name in compiles),
        "runs_per_cpu_hour": runs * 3600 / cpu,
        "runs_per_wall_hour": runs * 3600 / wall,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--cache", choices=("off", "on"), default="off")
    parser.add_argument("--child", choices=list(MODES), help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        train(args.child, args.runs, args.steps, args.workdir)
        return 0
    print(
        f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores;"
        f" {args.runs} runs x {args.steps} steps"
    )
    rows = [measure(mode, args.runs, args.steps, args.cache) for mode in MODES]
    print("| mode | wall s | CPU s | compiles (train step) | runs / CPU-hour | runs / wall hour |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['mode']} | {r['wall_s']:.0f} | {r['cpu_s']:.0f} | {r['compiles']} ({r['train_step_compiles']}) |"
            f" {r['runs_per_cpu_hour']:.0f} | {r['runs_per_wall_hour']:.0f} |"
        )
    base, new = rows
    print(
        f"vmapped / processes: runs per CPU-hour x{new['runs_per_cpu_hour'] / base['runs_per_cpu_hour']:.2f}, "
        f"per wall hour x{new['runs_per_wall_hour'] / base['runs_per_wall_hour']:.2f}; "
        f"load average after: {os.getloadavg()[0]:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
