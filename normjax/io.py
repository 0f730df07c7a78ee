"""Crash-safe JSON: numpy/JAX values to plain JSON, atomic writes (temp file, fsync, os.replace)."""

import json
import math
import os
import tempfile

import numpy as np


def to_jsonable(value):
    """Numpy/JAX scalars and arrays to Python numbers and lists; non-finite floats to None."""
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return to_jsonable(np.asarray(value).tolist())
    if isinstance(value, float | np.floating):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer | np.bool_):
        return value.item()
    return value


def write_json(path: str, obj) -> None:
    """Writes `obj` as JSON atomically: a temporary file in the same folder, fsync, os.replace."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(to_jsonable(obj), f, indent=2, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def read_json(path: str):
    with open(path) as f:
        return json.load(f)
