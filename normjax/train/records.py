"""Crash-safe result files: atomic JSON and an fsync'd JSONL metrics log (see metric_writers for the rest)."""

import json
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

    def __init__(self, path: str):
        self.path = path

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
