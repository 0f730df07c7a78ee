"""Sweeps: expand a grid of config overrides, run (a shard of) it, summarize every run's outcome."""

import dataclasses
import itertools
import os

from tqdm.auto import tqdm

from normjax import io
from normjax.train import compile_cache, records
from normjax.train.config_io import ConfigError, RunConfig, as_dict, parse, path_component, set_path
from normjax.train.config_schema import shape_key
from normjax.train.job import read_summary, with_unigram
from normjax.train.loop import STOP, run_group, run_job
from normjax.train.outcomes import STALL_FRACTION
from normjax.train.workers import PARALLEL, choose_workers, run_side_by_side


@dataclasses.dataclass(frozen=True)
class SweepRun:
    name: str  # also the run's subfolder
    overrides: dict
    run: RunConfig
    group: str = ""  # the config.sweep.grids entry it comes from ("" = config.sweep.axes)


def _fmt(value) -> str:
    return "-".join(map(str, value)) if isinstance(value, tuple | list) else str(value)


def _product(base: dict, axes: dict, group: str, num_devices: int) -> list[SweepRun]:
    """Every combination of `axes` over `base`, named by its values (prefixed by `grid=group,`)."""
    for key, options in axes.items():
        where = f"config.sweep.grids[{group!r}]" if group else "config.sweep.axes"
        if not isinstance(options, list | tuple) or not options:
            raise ConfigError(f"{where}[{key!r}]={options!r} must be a non-empty list")
        set_path(base, key, options[0])  # a copy: raises for an unknown key
    out = []
    for combo in itertools.product(*axes.values()):
        overrides = dict(zip(axes, combo, strict=True))
        merged = base
        for key, value in overrides.items():
            merged = set_path(merged, key, value)
        parts = ([f"grid={group}"] if group else []) + [f"{k.split('.')[-1]}={_fmt(v)}" for k, v in overrides.items()]
        out.append(SweepRun(path_component(",".join(parts) or "run"), overrides, parse(merged, num_devices), group))
    return out


def expand(config, num_devices: int = 1) -> list[SweepRun]:
    """Every combination of `config.sweep.axes` (dotted key -> list of values), each run validated.

    `config.sweep.grids` (optional, name -> axes) adds further sub-grids over the same base config: their runs
    follow the main grid's, each named with a leading `grid=<name>,`. Without main axes only the sub-grids run.

    Raises:
      ConfigError: for an unknown axis key, an empty axis, or any invalid run (before any compute).
    """
    values = as_dict(config)
    sweep = dict(values.get("sweep", {}))
    unknown = sorted(set(sweep) - {"axes", "vmap", "grids", "workers", "parallel"})
    if unknown:
        raise ConfigError(f"unknown key config.sweep.{unknown[0]}; valid keys: axes, vmap, grids, workers, parallel")
    if sweep.get("parallel", "processes") not in PARALLEL:
        raise ConfigError(f"config.sweep.parallel={sweep['parallel']!r} must be one of {', '.join(PARALLEL)}")
    workers = sweep.get("workers", 1)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise ConfigError(f"config.sweep.workers={workers!r} must be an int >= 0 (0: one process per CPU core)")
    axes = dict(sweep.get("axes", {}))
    grids = {str(name): dict(g) for name, g in dict(sweep.get("grids", {})).items()}
    base = {k: v for k, v in values.items() if k != "sweep"}
    out = _product(base, axes, "", num_devices) if axes or not grids else []
    for name, grid in grids.items():
        out += _product(base, grid, name, num_devices)
    return out


def parse_shard(shard: str) -> tuple[int, int]:
    """ "i/n" -> (i, n) with 0 <= i < n."""
    try:
        i, n = (int(x) for x in shard.split("/"))
    except ValueError:
        raise ConfigError(f"--shard={shard!r} must look like i/n, e.g. 0/2") from None
    if not 0 <= i < n:
        raise ConfigError(f"--shard={shard!r} needs 0 <= i < n")
    return i, n


def summarize(runs: list[SweepRun], workdir: str) -> dict:
    """sweep.json's content: every run's overrides and summary (status "pending" until done)."""
    out = []
    for r in runs:
        summary = read_summary(os.path.join(workdir, r.name))
        if summary is not None:
            summary = with_unigram(os.path.join(workdir, r.name), r.run, summary)
        out.append(
            {
                "name": r.name,
                "group": r.group,
                "overrides": r.overrides,
                "status": "done" if summary else "pending",
                "summary": summary,
            }
        )
    return {"runs": out}


def run_sweep(
    runs: list[SweepRun],
    workdir: str,
    shard: tuple[int, int] = (0, 1),
    *,
    force: bool = False,
    vmap: bool = False,
    progress: bool = True,
    mesh=None,
    workers: int = 1,
    parallel: str = "processes",
) -> dict:
    """Runs runs[i::n] (finished runs are skipped, unfinished ones resume), keeping DIR/sweep.json
    up to date. Runs that share shapes share one compiled step; with `vmap` they also train in
    lockstep as one vmapped step (slower than one after another on a small CPU). Each run holds the
    lock of its own folder while it trains, so shards of one sweep run side by side.

    Args:
      force: retrain this shard's runs from step 0 (see run_job).
      workers: train the shard's runs this many at a time (0: one per CPU core on CPU, 1 on accelerators;
        `workers.choose_workers`). Each run's numbers do not depend on it.
      parallel: "processes" (spawned, one XLA thread each: the faster per run on the CPU measured) or "threads"
        (one process, one compile per structure: a faster start; `workers.run_side_by_side`).

    Returns:
      The final sweep.json content (all runs of the grid, including other shards' finished ones).

    Raises:
      ConfigError: when a run folder holds a run of another config (naming the keys) and not `force`.
      WorkdirError: when another process trains one of this shard's runs, a run's file is damaged, or a
        worker process dies.
    """
    i, n = shard
    mine = runs[i::n]
    os.makedirs(workdir, exist_ok=True)
    io.remove_stale_tmp(workdir)
    compile_cache.enable_compilation_cache()  # before the first compile: worker processes inherit the setting
    count = 1 if mesh is not None else choose_workers(workers, len(mine))
    common = dict(runs=runs, workdir=workdir, force=force, vmap=vmap, progress=progress)
    if count == 1:
        train_runs(selected=mine, mesh=mesh, label=f"sweep {i}/{n}", **common)
    else:
        calls = [
            common | dict(selected=mine[j::count], label=f"sweep {i}/{n} worker {j}/{count}", position=2 * j)
            for j in range(count)
        ]
        run_side_by_side(train_runs, calls, count, parallel, stop=STOP)
    return write_status(runs, workdir)


def train_runs(
    runs: list[SweepRun],
    selected: list[SweepRun],
    workdir: str,
    *,
    force: bool,
    vmap: bool,
    progress: bool,
    mesh=None,
    label: str = "sweep",
    position: int = 0,
) -> None:
    """Trains `selected` (of the sweep `runs`) one group after another, updating DIR/sweep.json after each."""
    groups: dict[str, list[SweepRun]] = {}
    for r in selected:
        groups.setdefault(shape_key(r.run) if vmap else r.name, []).append(r)
    bar = tqdm(groups.values(), desc=label, position=position, disable=not progress, dynamic_ncols=True)
    for group in bar:
        names = ", ".join(r.name for r in group)
        bar.set_postfix_str(names)
        items = [(r.run, os.path.join(workdir, r.name)) for r in group]
        if len(group) == 1:
            run_job(*items[0], force=force, mesh=mesh, progress=progress, desc=names, position=position + 1)
        else:
            run_group(
                items, force=force, mesh=mesh, progress=progress, desc=f"{len(group)} runs", position=position + 1
            )
        write_status(runs, workdir)


def write_status(runs: list[SweepRun], workdir: str) -> dict:
    """Writes DIR/sweep.json from the runs' summaries now and returns it. Shards take turns (a lock of its own),
    so the last one to write has seen every run finished before it: sweep.json never shows a done run pending."""
    with io.FolderLock(workdir, wait=True, name=".sweep.lock"):
        result = summarize(runs, workdir)
        records.write_json(os.path.join(workdir, "sweep.json"), result)
    return result


def format_table(result: dict) -> str:
    """A text table: grid, axis values, outcome, diverged step, final valid nll / accuracy / BLEU, and a last
    line with the unigram level(s) H the outcome "stalled" was judged against (see train.outcomes)."""
    rows = result["runs"]
    keys = list(dict.fromkeys(k for r in rows for k in r["overrides"]))
    grouped = any(r.get("group") for r in rows)
    header = (["grid"] if grouped else []) + [k.split(".")[-1] for k in keys]
    header += ["outcome", "step", "valid_nll", "valid_acc", "bleu"]
    table, levels = [header], set()
    for r in rows:
        s = r["summary"] or {}
        final = s.get("final", {})
        cells = ([r.get("group") or "-"] if grouped else []) + [_fmt(r["overrides"].get(k, "-")) for k in keys]
        cells.append(s.get("outcome", r["status"]))
        cells.append(str(s.get("diverged_step") or s.get("steps", "")))
        for k in ("valid/nll", "valid/accuracy", "valid/bleu"):
            v = final.get(k)
            cells.append("-" if v is None else f"{v:.3f}" if k != "valid/bleu" else f"{v:.1f}")
        table.append(cells)
        if s.get("unigram_nll") is not None:
            levels.add((round(s["unigram_nll"], 3), round(s["stall_nll"], 3)))
    widths = [max(len(row[c]) for row in table) for c in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in table]
    if levels:
        lines.append(
            "unigram level H = "
            + ", ".join(f"{h:.3f} (stalled: valid_nll >= {stall:.3f})" for h, stall in sorted(levels))
            + f" nats per token; stalled = within {STALL_FRACTION:.0%} of H"
        )
    return "\n".join(lines)
