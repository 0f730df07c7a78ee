"""Crash-safe result files: atomic JSON, an fsync'd JSONL metrics log, optional TensorBoard."""

import json
import logging
import math
import os
import tempfile

from normjax.io import read_json, to_jsonable, write_json  # noqa: F401  (re-exported)


def read_jsonl(path: str) -> list[dict]:
    """The complete records of a JSONL file (a torn last line from a crash is skipped)."""
    if not os.path.exists(path):
        return []
    records = []
    with open(path) as f:
        for line in f:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                break
    return records


class MetricsLog:
    """metrics.jsonl: one record per logged step, each appended with flush + fsync."""

    def __init__(self, path: str, tensorboard_dir: str | None = None):
        self.path = path
        self.tb = _tensorboard_writer(tensorboard_dir) if tensorboard_dir else None

    def truncate(self, last_step: int) -> None:
        """Keeps only records with step <= last_step (the last checkpoint), rewritten atomically."""
        kept = [r for r in read_jsonl(self.path) if r.get("step", math.inf) <= last_step]
        folder = os.path.dirname(os.path.abspath(self.path))
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".jsonl")
        with os.fdopen(fd, "w") as f:
            f.writelines(json.dumps(r, sort_keys=True) + "\n" for r in kept)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def append(self, record: dict) -> None:
        record = to_jsonable(record)
        with open(self.path, "a") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        if self.tb is not None:
            for key, value in record.items():
                if key != "step" and isinstance(value, int | float) and not isinstance(value, bool):
                    self.tb.add_scalar(key, value, record["step"])
            self.tb.flush()

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()


def _tensorboard_writer(logdir: str):
    """A SummaryWriter from tensorboardX or torch if installed (TensorBoard is optional)."""
    try:
        from tensorboardX import SummaryWriter
    except ImportError:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            logging.warning("train.tensorboard: neither tensorboardX nor torch is installed; skipping")
            return None
    return SummaryWriter(logdir)
