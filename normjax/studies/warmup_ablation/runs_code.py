"""The training code a sweep's run folders were trained by: runs of other code are trained again, never reused."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil

from normjax import io

MARKER = "runs_code.json"  # beside the run folders: {"code": the training_code() they were trained by}
_PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # normjax/
_NOT_TRAINING = ("studies", "report", "plotting.py", "threshold.py")  # analysis, figures, rules' thresholds


def training_code() -> str:
    """sha256 (16 hex) of every normjax source file outside the studies, the report, plotting and the rules'
    thresholds: all the code that can change what a run trains (model, train, data, jacobian), lazily imported
    modules included."""
    digest = hashlib.sha256()
    for root, dirs, files in os.walk(_PACKAGE):
        dirs[:] = sorted(d for d in dirs if not (root == _PACKAGE and d in _NOT_TRAINING) and d != "__pycache__")
        for name in sorted(f for f in files if f.endswith(".py")):
            rel = os.path.relpath(os.path.join(root, name), _PACKAGE)
            if rel in _NOT_TRAINING:
                continue
            with open(os.path.join(root, name), "rb") as f:
                digest.update(rel.encode() + b"\0" + f.read())
    return digest.hexdigest()[:16]


def drop_runs_of_other_code(folder: str, names: list[str]) -> list[str]:
    """Deletes the run folders `names` under `folder` unless MARKER says this training code trained them (no
    marker, or a damaged one: runs of unknown code, deleted too), then records this code. Returns the names
    deleted. Shards of one sweep starting together take turns (a lock), so only the first deletes."""
    code = training_code()
    with io.FolderLock(folder, wait=True, name=".runs_code.lock"):
        path = os.path.join(folder, MARKER)
        try:
            saved = io.read_json(path).get("code") if os.path.exists(path) else None
        except io.CorruptFileError as e:  # damaged: which code trained the runs is unknown
            logging.warning("%s", e)
            saved = None
        if saved == code:
            return []
        dropped = [n for n in names if os.path.isdir(os.path.join(folder, n))]
        if dropped:
            logging.warning(
                "%s: %d run folders were trained by %s; training them again",
                folder, len(dropped), f"other code ({saved})" if saved else "code of unknown version",
            )  # fmt: skip
        for name in dropped:
            shutil.rmtree(os.path.join(folder, name))
        io.write_json(path, {"code": code})
    return dropped
