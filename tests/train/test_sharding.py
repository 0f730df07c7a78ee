"""8 forced host devices: the data-parallel step and the vmapped multi-run step equal the plain one."""

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]

SCRIPT = r"""
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
import numpy as np
from flax import nnx
import normjax
from normjax.train import job, sharding, steps
from normjax.train.config_io import default_config, parse, set_path

assert jax.device_count() == 8
values = default_config().to_dict()
values.pop("sweep")
for key, value in OVERRIDES.items():
    values = set_path(values, key, value)
runs = [parse(set_path(values, "train.lr", lr), num_devices=8) for lr in (0.1, 0.05)]
task, cfg = job.prepare(runs[0], num_devices=8)
fns = job.compiled()


def init(run):
    model = normjax.Transformer(cfg, rngs=nnx.Rngs(0))  # fresh arrays: the step donates its state
    spec = job.step_spec(run, model, task.kind)
    return spec, steps.init_state(spec, model, 0, job.hparams(run, cfg))


def plain(run, devices):
    mesh = sharding.data_mesh(devices)
    spec, state = init(run)
    state, losses = sharding.replicate(state, mesh), []
    for i in range(3):
        batch = sharding.shard_batch(task.train.batch(i), mesh)
        assert len(batch["src"].sharding.device_set) == len(devices)
        state, metrics = fns.train(spec, state, batch)
        losses.append(float(metrics["loss"]))
    assert all(leaf.sharding.is_fully_replicated for leaf in jax.tree.leaves(state.params))
    return losses, [np.asarray(x) for x in jax.tree.leaves(state.params)]


def vmapped(devices):
    mesh = sharding.data_mesh(devices)
    specs, states = zip(*[init(run) for run in runs])
    state = sharding.replicate(jax.tree.map(lambda *xs: jnp.stack(xs), *states), mesh)
    losses = []
    for i in range(3):
        b = task.train.batch(i)
        batch = sharding.shard_batch({k: np.stack([v, v]) for k, v in b.items()}, mesh, 1)
        state, metrics = fns.vtrain(specs[0], state, batch)
        losses.append(np.asarray(metrics["loss"]))
    leaves = [np.asarray(x) for x in jax.tree.leaves(state.params)]
    return [([float(l[r]) for l in losses], [x[r] for x in leaves]) for r in range(2)]


def check(got, want):
    # float64: data parallelism or vmapping only reorders sums (relative error ~1e-15 each); 1e-10
    # leaves room for three steps and still catches any real difference (float32 would be ~1e-6).
    # SGD, not Adam: Adam divides by sqrt(v) + eps, which blows the ~1e-17 rounding noise of
    # gradients that are exactly zero in exact arithmetic (attention key biases) up to ~1e-11.
    np.testing.assert_allclose(got[0], want[0], rtol=1e-10)
    for a, b in zip(got[1], want[1], strict=True):
        assert a.dtype == np.float64
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


one = [plain(run, jax.devices()[:1]) for run in runs]
check(plain(runs[0], jax.devices()), one[0])
for got, want in zip(vmapped(jax.devices()), one, strict=True):
    check(got, want)
assert one[0][0][2] != one[0][0][0] and one[0][0][2] != one[1][0][2]
print("OK")
"""


def test_sharded_and_vmapped_steps_match_the_single_device_step(tiny_overrides):
    overrides = tiny_overrides | {
        "model.dtype": "float64",
        "model.param_dtype": "float64",
        "train.batch_size": 16,
        "train.optimizer": "sgd",
    }
    env = os.environ | {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    out = subprocess.run(
        [sys.executable, "-c", f"OVERRIDES = {overrides!r}\n{SCRIPT}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("OK")
