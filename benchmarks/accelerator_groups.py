"""Accelerator cell groups: the warmup-ablation cells that decide verdicts, one vmapped program per structure.

  scripts/accelerator_check.sh GROUP [GROUP ...] [--tiny] [--workdir=WORKDIR] [--budget_s=540] [--pack=FILE]
  scripts/accelerator_check.sh --merge=FILE [--tiny] [--workdir=WORKDIR] | --prepare=DIR | --list

GROUP is one of GROUPS (normjax/studies/accelerator_groups/groups.py, where each is defined and sized). A study
group (deep128_main, deep128_s7) runs a whole study at other settings into WORKDIR/accelerator_groups/<GROUP>/
<study>/ (its results.json; its cached pieces resume a cut-off run). Any other group
is a sub-grid of warmup_ablation's `:standard` config (its data, model width, optimizer and fair warmup control)
named `grid=<GROUP>,...`: its runs land in WORKDIR/accelerator_groups/<GROUP>/ (WORKDIR: --workdir, else
results) in the study's run format (config.json, metrics.jsonl, summary.json with the device and precision,
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
Several groups share one --budget_s, in order. --pack=FILE (default $OUT/groups.tar.gz when $OUT is set: a
device call) then writes the workdir's group folders as one archive, which --merge=FILE unpacks into a workdir
here; --prepare=DIR copies the data the groups read for a device (accelerator_groups/transfer.py;
scripts/device_groups.sh does the three steps).
"""

import argparse
import json
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


def _train(names: list[str], args) -> int:
    """Trains the groups `names` in order within one --budget_s; 0 when all finished, 3 when the budget cut one
    off, 2 when one was refused. Judges the groups of the workdir after each."""
    from normjax.train.sweep import format_table

    t0 = time.time()
    for name in names:
        left = args.budget_s - (time.time() - t0)
        if left <= 0:
            print(f"no time left for {name} ({args.budget_s:.0f} s spent); rerun to go on", flush=True)
            return 3
        try:
            result = run_group(name, args.workdir, args.tiny, left)
        except KeyboardInterrupt as e:
            print(f"stopped after {time.time() - t0:.0f} s ({e}); rerun the same command to resume", flush=True)
            judge_groups(args.workdir)
            return 3
        except ValueError as e:  # ConfigError included
            print(f"error: {e}", file=sys.stderr)
            return 2
        folder = os.path.join(args.workdir, STUDY_DIR, name)
        if "runs" in result and isinstance(result["runs"], list):  # a sweep group's sweep.json
            print(format_table(result), flush=True)
            done = sum(r["status"] == "done" for r in result["runs"])
            print(f"{done}/{len(result['runs'])} runs done in {time.time() - t0:.0f} s -> {folder}")
        else:  # a study group's results.json
            print(f"{result['experiment']} done in {time.time() - t0:.0f} s -> {folder}/{result['experiment']}")
        print(f"judged with the other groups there: {judge_groups(args.workdir)}", flush=True)
    return 0


def main(argv=None) -> int:
    from normjax.io import WorkdirError
    from normjax.studies.accelerator_groups import transfer

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("groups", nargs="*", metavar="GROUP", help="groups to train, in order, within --budget_s")
    parser.add_argument("--tiny", action="store_true", default=os.environ.get("NORMJAX_TINY") == "1")
    parser.add_argument("--workdir", default="results", help="the report's workdir")
    parser.add_argument("--budget_s", type=float, default=540.0, help="for all the groups together")
    out = os.environ.get("OUT")  # a device call's output folder
    pack = os.path.join(out, "groups.tar.gz") if out else None
    parser.add_argument("--pack", metavar="FILE", default=pack, help="then write the group folders to FILE (.tar.gz)")
    parser.add_argument("--merge", metavar="FILE", help="unpack FILE (from --pack) into the workdir; judge")
    parser.add_argument("--prepare", metavar="DIR", help="copy the data the groups read into DIR (for a device)")
    parser.add_argument("--list", action="store_true", help="list the groups and exit")
    args = parser.parse_args(argv)
    if unknown := [g for g in args.groups if g not in GROUPS]:
        parser.error(f"unknown group {unknown[0]!r} (--list names them)")
    if not args.budget_s > 0:
        parser.error(f"--budget_s={args.budget_s} must be a positive number of seconds")
    if os.path.exists(args.workdir) and not os.path.isdir(args.workdir):
        parser.error(f"--workdir={args.workdir} is a file, not a folder")
    try:
        if args.prepare:
            print(json.dumps(transfer.prepare(args.prepare), indent=1))
            return 0
        if args.merge:
            merged = transfer.merge(args.merge, args.workdir, args.tiny)
            print("merged: " + ", ".join(f"{n} ({done} finished)" for n, done in merged.items()))
            print(f"judged with the other groups there: {judge_groups(args.workdir)}", flush=True)
            return 0
    except (transfer.TransferError, WorkdirError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.list or not args.groups:
        for name, group in GROUPS.items():
            print(f"{name:12s} {group.doc}")
        return 0 if args.list else 2
    import jax

    devices = jax.devices()
    names = " ".join(args.groups)
    print(f"group {names} on {len(devices)} x {devices[0].device_kind} ({jax.default_backend()})", flush=True)
    status = _train(args.groups, args)
    if args.pack:
        try:
            packed = transfer.pack(args.workdir, args.pack)
        except (transfer.TransferError, WorkdirError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        print(f"packed {args.pack}: " + ", ".join(f"{n} ({done} finished)" for n, done in packed.items()))
    return status


if __name__ == "__main__":
    sys.exit(main())
