"""Data parallelism: a 1-D "data" mesh, replicated state, batches sharded along rows."""

from collections.abc import Sequence
from typing import TypeVar

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

T = TypeVar("T")


def data_mesh(devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A mesh over all (or the given) devices with one axis, "data"."""
    return Mesh(np.asarray(devices if devices is not None else jax.devices()), ("data",))


def replicate(tree: T, mesh: Mesh) -> T:
    """Every leaf copied to every device of the mesh (parameters, optimizer state)."""
    return jax.device_put(tree, NamedSharding(mesh, PartitionSpec()))


def shard_batch(batch: dict, mesh: Mesh, row_axis: int = 0) -> dict:
    """A global batch (the same numpy arrays on every process) as arrays sharded along rows.

    Each process contributes its own contiguous block of rows, so multi-host runs need no extra data
    plumbing; rows must be divisible by the device count (config validation checks it). `row_axis` is
    1 for a stack of batches (one per vmapped run).
    """
    spec = PartitionSpec(*([None] * row_axis), "data")
    sharding = NamedSharding(mesh, spec)
    n, i = jax.process_count(), jax.process_index()

    def one(x):
        x = np.asarray(x)
        rows = x.shape[row_axis] // n
        local = np.take(x, np.arange(i * rows, (i + 1) * rows), axis=row_axis)
        return jax.make_array_from_process_local_data(sharding, local, x.shape)

    return {k: one(v) for k, v in batch.items()}
