"""The Jacobian lens file: a self-describing, checksummed .npz of data-averaged per-layer Jacobians."""

import hashlib
import io as bytes_io
import json
import zipfile

import numpy as np

from normjax import io
from normjax.probes.jacobian_lens import MeanJacobians

FORMAT, FORMAT_VERSION = "normjax.jacobian_lens", 1
ARRAYS = ("jacobians", "std", "count", "layers")  # plus "metadata": a JSON string (0-d unicode array)
SUM_KEY = "content_sha256"  # in the metadata: sha256 of the arrays and of the rest of the metadata


def _content_sha256(arrays: dict, metadata: dict) -> str:
    h = hashlib.sha256()
    for name in ARRAYS:
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}:{a.dtype.str}:{a.shape};".encode())
        h.update(a.tobytes())
    h.update(json.dumps({k: v for k, v in metadata.items() if k != SUM_KEY}, sort_keys=True).encode())
    return h.hexdigest()


def save(path: str, lens: MeanJacobians, *, dtype=None) -> None:
    """Writes `lens` to `path` (.npz) atomically (temp file, fsync, rename); refuses a symbolic link there.

    Args:
      path: the file to write (replaced whole, never half-written).
      lens: from `jacobian_lens.mean_block_jacobians` (or `load`).
      dtype: storage dtype of jacobians and std (e.g. "float32"); None keeps theirs (float64: exact).

    Raises:
      normjax.io.WorkdirError: `path` is a symbolic link or a folder, or the disk is full.
    """
    io.writable_target(path)
    cast = (lambda a: np.asarray(a)) if dtype is None else (lambda a: np.asarray(a, dtype))
    arrays = {
        "jacobians": cast(lens.jacobians),
        "std": cast(lens.std),
        "count": np.asarray(lens.count, np.int64),
        "layers": np.asarray(lens.layers, np.int64),
    }
    metadata = io.to_jsonable(lens.metadata) | {"format": FORMAT, "format_version": FORMAT_VERSION}
    metadata |= {"array_dtype": str(arrays["jacobians"].dtype)}
    metadata[SUM_KEY] = _content_sha256(arrays, metadata)
    buffer = bytes_io.BytesIO()
    np.savez(buffer, metadata=np.asarray(json.dumps(metadata, sort_keys=True)), **arrays)
    io.write_bytes(path, buffer.getvalue())


def _corrupt(path: str, why: str) -> io.CorruptFileError:
    return io.CorruptFileError(f"{path} is not a readable normjax Jacobian lens file: {why}")


def load(path: str) -> MeanJacobians:
    """Reads a file written by `save`, checking its structure and checksum.

    Returns:
      The `MeanJacobians` that was saved (arrays in their stored dtype).

    Raises:
      FileNotFoundError: no file. normjax.io.CorruptFileError (a ValueError): truncated, not an .npz, a missing
      or misshapen array, another format. normjax.io.ChecksumError: content changed since it was written.
    """
    with open(path, "rb") as f:
        data = f.read()
    if not data.startswith(b"PK\x03\x04"):
        raise _corrupt(path, "not a zip (.npz) archive")
    try:
        with np.load(bytes_io.BytesIO(data), allow_pickle=False) as npz:
            missing = [k for k in ("metadata", *ARRAYS) if k not in npz.files]
            if missing:
                raise _corrupt(path, f"missing {missing}")
            arrays = {k: npz[k] for k in ARRAYS}
            metadata = json.loads(str(npz["metadata"]))
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, KeyError) as e:
        if isinstance(e, io.CorruptFileError):
            raise
        raise _corrupt(path, f"truncated or damaged ({type(e).__name__}: {e})") from None
    if not isinstance(metadata, dict) or metadata.get("format") != FORMAT:
        raise _corrupt(path, f"format {metadata.get('format') if isinstance(metadata, dict) else None!r}")
    if metadata.get("format_version") != FORMAT_VERSION:
        raise _corrupt(path, f"format_version {metadata.get('format_version')!r}, this normjax reads {FORMAT_VERSION}")
    J, layers = arrays["jacobians"], arrays["layers"]
    if J.ndim != 3 or J.shape[1] != J.shape[2] or arrays["std"].shape != J.shape or layers.shape != J.shape[:1]:
        raise _corrupt(path, f"shapes jacobians {J.shape}, std {arrays['std'].shape}, layers {layers.shape}")
    if metadata.get(SUM_KEY) != _content_sha256(arrays, metadata):
        raise io.ChecksumError(f"{path} does not match the checksum written with it (edited or damaged since)")
    return MeanJacobians(J, arrays["std"], int(arrays["count"]), layers, metadata)
