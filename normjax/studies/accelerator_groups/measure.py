"""accelerator_groups: the cell groups' run folders under WORKDIR/accelerator_groups/<GROUP>/, summarized."""

from __future__ import annotations

import os

from normjax import train
from normjax.io import CorruptFileError, read_json
from normjax.studies.accelerator_groups.groups import GROUPS, group_config
from normjax.studies.grid_runs import summarize_runs

RECORD = "group.json"  # written before a group trains (benchmarks/accelerator_groups.py): tiny or not, its data


def expected_runs(name: str, tiny: bool = False) -> list[str]:
    """The run names of group `name` (at its tiny size when `tiny`)."""
    return [r.name for r in train.expand(group_config(name, tiny))]


def read_record(folder: str) -> dict:
    """FOLDER/group.json, checked (CorruptFileError when damaged)."""
    record = read_json(os.path.join(folder, RECORD))
    if not isinstance(record, dict) or not isinstance(record.get("tiny"), bool):
        raise CorruptFileError(f"{os.path.join(folder, RECORD)} is not a group record (no tiny: true|false)")
    return record


def read_group(name: str, folder: str) -> dict:
    """What `folder` holds of group `name`: whether it ran, at which size, its finished runs as warmup_ablation's
    rows (each with the device and precision its summary records) and the settings the rules read.

    Raises:
      CorruptFileError: a damaged group record or sweep.json, or a finished run that the group does not define
        (trained by another group definition: its numbers would be judged as this group's).
    """
    group = GROUPS[name]
    entry = {"doc": group.doc, "read_by": group.read_by}
    if not os.path.exists(os.path.join(folder, RECORD)):
        return entry | {"present": False, "tiny": False, "expected": len(expected_runs(name)), "done": 0, "runs": []}
    record = read_record(folder)
    config = group_config(name, record["tiny"])
    names = set(expected_runs(name, record["tiny"]))
    sweep_path = os.path.join(folder, "sweep.json")
    sweep = read_json(sweep_path) if os.path.exists(sweep_path) else {"runs": []}
    if not isinstance(sweep, dict) or not isinstance(sweep.get("runs"), list):
        raise CorruptFileError(f"{sweep_path} is not a sweep's record (no runs list)")
    done = [e for e in sweep["runs"] if e.get("status") == "done"]
    if strangers := sorted(e["name"] for e in done if e["name"] not in names):
        raise CorruptFileError(
            f"{sweep_path}: runs {strangers[:3]} are not runs of group {name} as defined now (another definition "
            "trained them); move that folder away and train the group again"
        )
    devices = {e["name"]: (e.get("summary") or {}).get("device") for e in done}
    rows = [r | {"device": devices[r["name"]]} for r in summarize_runs(config, {"runs": done}, folder)]
    return entry | {
        "present": True,
        "tiny": record["tiny"],
        "data": record.get("data"),
        "expected": len(names),
        "done": len(done),
        "runs": rows,
        "model": dict(config.model),
        "data_task": config.data.task,
        "num_steps": config.train.num_steps,
        "schedule": config.train.schedule,
        "decay_start": config.train.decay_start,
        "b2": config.train.b2,
    }


def _progress(folder: str) -> tuple[bool, int]:
    """(whether FOLDER holds a group, how many of its runs are done), from its files alone."""
    sweep = os.path.join(folder, "sweep.json")
    runs = read_json(sweep).get("runs", []) if os.path.exists(sweep) else []
    return os.path.exists(os.path.join(folder, RECORD)), sum(e.get("status") == "done" for e in runs)


def stale(study_dir: str, results: dict) -> str:
    """Which groups changed in STUDY_DIR since results.json summarized it ('' when none): runs that arrived (a
    group trained or copied in since) or went."""
    changed = []
    for name, group in results["groups"].items():
        now = _progress(os.path.join(study_dir, name))
        if now != (group["present"], group["done"]):
            changed.append(f"{name}: {group['done']} -> {now[1]} runs done")
    return "; ".join(changed) and f"the group folders changed since it was built ({'; '.join(changed)})"


def compute(config, study) -> dict:
    """Every group of config.groups read from STUDY_DIR/<group>/ (absent: it waits for a device)."""
    return {"groups": {name: read_group(name, os.path.join(study.path, name)) for name in config.groups}}


def plot(results: dict, study) -> list[str]:
    """No figures of its own: the rules' tables and rows show the groups (warmup_ablation draws the CPU grid)."""
    return []
