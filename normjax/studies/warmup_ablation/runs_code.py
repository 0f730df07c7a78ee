"""The training code a sweep's run folders were trained by: runs of other code are trained again, never reused."""

from __future__ import annotations

import logging
import os
import shutil

from normjax import io, train
from normjax.studies.runner import code_fingerprint

MARKER = "runs_code.json"  # beside the run folders: {"code": the training_code() they were trained by}


def training_code() -> str:
    """The studies' one code fingerprint (runner.code_fingerprint) of the sweep engine, train.run_sweep: every
    normjax module a run's training reaches (model, train, data, jacobian), imports inside functions included;
    not the studies, the report or plotting."""
    return code_fingerprint(train.run_sweep)


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
