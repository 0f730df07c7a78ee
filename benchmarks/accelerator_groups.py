"""Accelerator cell groups: the warmup-ablation cells that decide verdicts, one vmapped program per structure.

  scripts/accelerator_check.sh GROUP [--tiny] [--workdir=WORKDIR] [--budget_s=540] [--list]

GROUP is one of GROUPS (normjax/studies/accelerator_groups/groups.py, where each is defined and sized). A study
group (deep128_main, deep128_s7) runs a whole study at other settings into WORKDIR/accelerator_groups/<GROUP>/
<study>/ (its results.json; its cached pieces resume a cut-off run). Any other group
is a sub-grid of warmup_ablation's `:standard` config (its data, model width, optimizer and fair warmup control)
named `grid=<GROUP>,...`: its runs land in WORKDIR/accelerator_groups/<GROUP>/ (WORKDIR: --workdir, else $OUT,
else results) in the study's run format (config.json, metrics.jsonl, summary.json with the device and precision,
checkpoints, sweep.json, runs_code.json) beside group.json (its size and the data it read), so the folders of
several machines merge by copying, and a finished run is skipped. After training, the accelerator_groups study
reads every group folder of WORKDIR and writes its results.json, which scripts/report.py judges beside the CPU's
studies (S5 at 12 layers, X7 at 6-6 layers; a group not run yet is a row that says it waits).
Runs of one structure (placement, depth, shapes) train in lockstep as one compiled, vmapped program, with lr,
warmup, seed and the other hyperparameters traced; a run that diverges is frozen and its step recorded.

The group stops itself after --budget_s (default 540 s: inside a 10-minute call) at the next update and exits
with status 3; the same command resumes every unfinished run from its newest checkpoint (checkpoints every tenth
of a run). --tiny (or NORMJAX_TINY=1) shrinks every group to seconds on a CPU (d 16, 2 layers, 6 steps, at most
two values of two axes, the synthetic translation task for Fig. 2): tests/test_accelerator_check.py runs each.
"""

import argparse
import os
import sys
import threading
import time

from normjax.studies.accelerator_groups.groups import GROUPS, group_config  # noqa: F401 (the groups, re-exported)

STUDY_DIR = "accelerator_groups"  # WORKDIR/accelerator_groups/<GROUP>/: the study that judges the groups reads it


def run_group(name: str, workdir: str, tiny: bool = False, budget_s: float = 540.0, progress: bool = True) -> dict:
    """Trains (or resumes) group `name` into WORKDIR/accelerator_groups/<name>/; stops at the next update after
    `budget_s`. A folder that holds the group at the other size (tiny or full) is refused (ValueError).

    Returns:
      a sweep group's sweep.json content, a study group's results.json; raises KeyboardInterrupt when the budget
      stopped it (the runs, or the study's cached pieces, resume next time).
    """
    from normjax.io import write_json
    from normjax.studies import BY_NAME, runner
    from normjax.studies.accelerator_groups.groups import StudyGroup, check_study_config, study_config
    from normjax.studies.accelerator_groups.measure import RECORD, read_record
    from normjax.studies.warmup_ablation import measure
    from normjax.train import loop

    group = GROUPS[name]
    whole = isinstance(group, StudyGroup)
    config = study_config(name, tiny) if whole else group_config(name, tiny)
    if whole:
        check_study_config(name, tiny)  # as its study's CLI would, before any compute
    folder = os.path.join(workdir, STUDY_DIR, name)
    if os.path.exists(os.path.join(folder, RECORD)):
        if read_record(folder)["tiny"] != tiny:
            size = "tiny" if not tiny else "full-size"
            raise ValueError(f"{folder} holds the {size} group {name}: use another --workdir for this size")
    else:  # before any run: the size the folder holds and the data it reads (hashed where it is read)
        os.makedirs(folder, exist_ok=True)
        data = None if whole else measure.data_record(config)  # a study records its own data in its results
        write_json(os.path.join(folder, RECORD), {"group": name, "tiny": tiny, "data": data})
    timer = threading.Timer(budget_s, loop.STOP.set)
    timer.daemon = True
    timer.start()
    try:
        if whole:
            study = BY_NAME[group.study]
            preset = {
                "preset": "quick" if tiny else "standard",
                "differs": sorted(group.tiny if tiny else group.overrides),
            }
            return runner.run_study(study.name, folder, config, study.compute, study.plot, provenance=preset)
        return measure.run_grid(config, folder, progress=progress)
    finally:
        timer.cancel()
        loop.STOP.clear()


def judge_groups(workdir: str) -> str:
    """Writes WORKDIR/accelerator_groups/results.json from every group folder there; returns its path."""
    from normjax.studies import runner
    from normjax.studies.accelerator_groups import STUDY

    config = STUDY.config.get_config("standard")
    saved = runner.run_study(STUDY.name, workdir, config, STUDY.compute, STUDY.plot, force=True,
                             provenance={"preset": "standard"})  # fmt: skip
    return os.path.join(workdir, STUDY_DIR, "results.json") if saved else ""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("group", nargs="?", choices=list(GROUPS))
    parser.add_argument("--tiny", action="store_true", default=os.environ.get("NORMJAX_TINY") == "1")
    parser.add_argument("--workdir", default=os.environ.get("OUT") or "results", help="the report's workdir")
    parser.add_argument("--budget_s", type=float, default=540.0)
    parser.add_argument("--list", action="store_true", help="list the groups and exit")
    args = parser.parse_args(argv)
    if not args.budget_s > 0:
        parser.error(f"--budget_s={args.budget_s} must be a positive number of seconds")
    if os.path.exists(args.workdir) and not os.path.isdir(args.workdir):
        parser.error(f"--workdir={args.workdir} is a file, not a folder")
    if args.list or args.group is None:
        for name, group in GROUPS.items():
            print(f"{name:12s} {group.doc}")
        return 0 if args.list else 2
    import jax

    from normjax.train.sweep import format_table

    devices = jax.devices()
    print(f"group {args.group} on {len(devices)} x {devices[0].device_kind} ({jax.default_backend()})", flush=True)
    t0 = time.time()
    try:
        result = run_group(args.group, args.workdir, args.tiny, args.budget_s)
    except KeyboardInterrupt as e:
        print(f"stopped after {time.time() - t0:.0f} s ({e}); rerun the same command to resume", flush=True)
        judge_groups(args.workdir)
        return 3
    except ValueError as e:  # ConfigError included
        print(f"error: {e}", file=sys.stderr)
        return 2
    folder = os.path.join(args.workdir, STUDY_DIR, args.group)
    if "runs" in result and isinstance(result["runs"], list):  # a sweep group's sweep.json
        print(format_table(result), flush=True)
        done = sum(r["status"] == "done" for r in result["runs"])
        print(f"{done}/{len(result['runs'])} runs done in {time.time() - t0:.0f} s -> {folder}")
    else:  # a study group's results.json
        print(f"{result['experiment']} done in {time.time() - t0:.0f} s -> {folder}/{result['experiment']}")
    print(f"judged with the other groups there: {judge_groups(args.workdir)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
