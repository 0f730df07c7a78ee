"""accelerator_groups: the cell groups' run folders under WORKDIR/accelerator_groups/<GROUP>/, summarized."""

from __future__ import annotations

import os

from normjax import train
from normjax.io import CorruptFileError, config_diff, describe_diff, read_checked, read_json, to_jsonable
from normjax.studies.accelerator_groups.groups import GROUPS, StudyGroup, group_config, study_config
from normjax.studies.grid_runs import summarize_runs

SCALE = ("d_model", "num_steps", "s7_steps")  # the settings of a study group's results that its rows name
RECORD = "group.json"  # written before a group trains (benchmarks/accelerator_groups.py): tiny or not, its data


def expected_runs(name: str, tiny: bool = False) -> list[str]:
    """The run names of group `name` (at its tiny size when `tiny`); a study group's one results.json."""
    if isinstance(GROUPS[name], StudyGroup):
        return [os.path.join(GROUPS[name].study, "results.json")]
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
    if isinstance(group, StudyGroup):
        return entry | read_study_group(name, folder, record["tiny"])
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


def read_study_group(name: str, folder: str, tiny: bool) -> dict:
    """A study group's results (FOLDER/<study>/results.json, checked) with the devices it ran on; no results yet
    (cut off: its cached pieces resume) is 0 of 1 done.

    Raises:
      CorruptFileError: results without a checksum or not the study's, or computed with a config other than the
        group's (another definition: they would be judged as this group's).
    """
    study = GROUPS[name].study
    path = os.path.join(folder, study, "results.json")
    if not os.path.exists(path):
        return {"present": True, "tiny": tiny, "expected": 1, "done": 0, "runs": []}
    saved, checked = read_checked(path)
    if not checked or not isinstance(saved, dict) or saved.get("experiment") != study:
        raise CorruptFileError(f"{path} is not {study}'s checksummed results")
    want = to_jsonable(study_config(name, tiny).to_dict())
    if diffs := [d for d in config_diff(saved["config"], want) if not d.startswith("_code")]:
        raise CorruptFileError(f"{path} was computed with another config than group {name}'s ({describe_diff(diffs)})")
    settings = {k: saved["config"][k] for k in SCALE if k in saved["config"]}
    devices = saved.get("machine", {}).get("devices", [])
    return {"present": True, "tiny": tiny, "expected": 1, "done": 1, "runs": [], "results": saved["results"]} | {
        "devices": devices,
        "settings": settings,
    }


def _progress(folder: str) -> tuple[bool, int]:
    """(whether FOLDER holds a group, how many of its runs are done), from its files alone."""
    sweep = os.path.join(folder, "sweep.json")
    runs = read_json(sweep).get("runs", []) if os.path.exists(sweep) else []
    done = sum(e.get("status") == "done" for e in runs)
    name = os.path.basename(folder)
    if isinstance(GROUPS.get(name), StudyGroup):
        done = int(os.path.exists(os.path.join(folder, GROUPS[name].study, "results.json")))
    return os.path.exists(os.path.join(folder, RECORD)), done


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
