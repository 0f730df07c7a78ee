"""Data parallelism: a 1-D "data" mesh, replicated state, batches sharded along rows."""

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec


def data_mesh(devices=None) -> Mesh:
    """A mesh over all (or the given) devices with one axis, "data"."""
    return Mesh(np.asarray(devices if devices is not None else jax.devices()), ("data",))


def replicate(tree, mesh: Mesh):
    """Every leaf copied to every device of the mesh (parameters, optimizer state)."""
    return jax.device_put(tree, NamedSharding(mesh, PartitionSpec()))


def shard_batch(batch: dict, mesh: Mesh) -> dict:
    """A global batch (the same numpy arrays on every process) as arrays sharded along rows.

    Each process contributes its own contiguous block of rows, so multi-host runs need no extra data
    plumbing; rows must be divisible by the device count (config validation checks it).
    """
    sharding = NamedSharding(mesh, PartitionSpec("data"))
    n, i = jax.process_count(), jax.process_index()

    def one(x):
        rows = x.shape[0] // n
        return jax.make_array_from_process_local_data(
            sharding, x[i * rows : (i + 1) * rows], x.shape
        )

    return {k: one(v) for k, v in batch.items()}
