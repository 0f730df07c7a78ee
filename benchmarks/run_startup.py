"""Start-up against training in one :standard warmup run: two runs of one structure back to back in one process.

  python -m benchmarks.run_startup [--placement=post]

The cell: warmup_ablation's :standard byte LM (6 layers, d 128, its evals, diagnostics and checkpoints), the first
two runs of its grid at `--placement` (same structure: lr and warmup differ, both traced), trained one after the
other by run_job in this process, as a sweep worker trains its share. The first run pays the process's start-up
(data, compiles); the second reuses the compiled programs (the table counts the XLA programs each built, from
JAX's compile log), so first minus second is the start-up a run costs, and the second is what training costs.
Prints one table: wall s, CPU s (this process, every thread), programs compiled, steps per wall second.
"""

import argparse
import os
import tempfile
import time


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--placement", default="post")
    args = parser.parse_args(argv)
    from normjax.studies.warmup_ablation import config as study_config
    from normjax.train import sweep
    from normjax.train.compile_cache import count_compiles
    from normjax.train.loop import run_job

    runs = [r for r in sweep.expand(study_config.get_config("standard")) if not r.name.startswith("grid=")]
    picked = [r for r in runs if r.run.model["placement"] == args.placement][:2]
    if len(picked) < 2:
        raise SystemExit(f"the :standard grid has fewer than two runs at placement {args.placement!r}")
    rows, folder = [], tempfile.mkdtemp(prefix="run_startup-")
    for i, r in enumerate(picked):
        wall, cpu = time.perf_counter(), time.process_time()
        with count_compiles() as names:
            run_job(r.run, os.path.join(folder, str(i)), progress=False)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        rows.append((r.name, wall, cpu, sum(names.values()), r.run.train.num_steps / wall))
    print("| run | wall s | CPU s | programs compiled | steps / wall s |\n|---|---|---|---|---|")
    for name, wall, cpu, compiles, rate in rows:
        print(f"| {name} | {wall:.1f} | {cpu:.1f} | {compiles} | {rate:.1f} |")
    (_, w1, c1, *_), (_, w2, c2, *_) = rows
    print(f"start-up (first - second): {w1 - w2:.1f} wall s, {c1 - c2:.1f} CPU s ({(c1 - c2) / c1:.0%} of the first)")


if __name__ == "__main__":
    main()
