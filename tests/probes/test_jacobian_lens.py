"""Data-averaged per-layer Jacobians against per-sample jax.jacfwd, and their file's round trip and corruption."""

import functools
import io as bytes_io
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import normjax
from normjax import io
from normjax.probes import jacobian_lens, lens_file

T = 5


def batches():
    """Two batches of two sequences, the second with padding at its end."""
    toks = [jax.random.randint(jax.random.key(s), (2, T), 1, 11) for s in (1, 2)]
    mask = jnp.ones((2, T), bool).at[1, 3:].set(False)
    return [toks[0], ((toks[1],), {"padding_mask": mask})]


@functools.partial(jax.jit, static_argnames=("graphdef", "target"))
def jacfwd_per_layer(graphdef, state, toks_1T, mask_1T, target):
    """jax.jacfwd of each layer's map on one sequence, (L, T, D, T, D); one compile per target."""
    model = nnx.merge(graphdef, state)
    streams = normjax.probe(model, toks_1T, padding_mask=mask_1T)[1]["decoder"].streams
    ctx = normjax.block_context(model, toks_1T, padding_mask=mask_1T)
    fns = [
        normjax.block_fn(model, l, context=ctx) if target == "block" else normjax.stack_fn(model, start=l, context=ctx)
        for l in range(len(streams) - 1)
    ]
    return jnp.stack([jax.jacfwd(f)(streams[l][0]) for l, f in enumerate(fns)])


def reference(model, data, kind, target, positions):
    """Mean, std and count of the samples, each from jax.jacfwd of one sequence's own map (T, D) -> (T, D)."""
    graphdef, state = nnx.split(model)
    samples = []
    for batch in data:
        toks, mask = (
            (batch, jnp.ones(batch.shape, bool))
            if not isinstance(batch, tuple)
            else (batch[0][0], batch[1]["padding_mask"])
        )
        for b in range(toks.shape[0]):
            J_LTDTD = np.asarray(jacfwd_per_layer(graphdef, state, toks[b : b + 1], mask[b : b + 1], target))
            V = [t for t in range(T) if bool(mask[b, t]) and (positions is None or t in [p % T for p in positions])]
            for s in V:
                samples.append(J_LTDTD[:, :, :, s][:, V].sum(1) if kind == "transport" else J_LTDTD[:, s, :, s])
    return np.mean(samples, 0), np.std(samples, 0), len(samples)


@pytest.mark.parametrize(
    "kind,target,positions",
    [("transport", "block", None), ("position", "block", [1, -1])],
)
def test_mean_equals_the_mean_of_per_sample_jacfwd(helpers, kind, target, positions):
    model = helpers.model()
    data = batches()
    chunk = 3 if kind == "position" else None  # 8 tangents in three chunks
    lens = jacobian_lens.mean_block_jacobians(
        model, data, kind=kind, target=target, positions=positions, chunk_size=chunk
    )
    mean, std, count = reference(model, data, kind, target, positions)
    assert lens.count == count and lens.jacobians.shape == (2, 8, 8)
    np.testing.assert_allclose(lens.jacobians, mean, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(lens.std, std, rtol=1e-8, atol=1e-12)
    assert np.abs(lens.jacobians - np.eye(8)).max() > 1e-2  # the branches are really there
    meta = lens.metadata
    assert (meta["kind"], meta["target"], meta["placement"], meta["jacobian_dtype"]) == (kind, target, "pre", "float64")
    assert meta["model_config"]["d_model"] == 8 and meta["num_sequences"] == 4 and len(meta["data_sha256"]) == 64


def test_final_target_is_the_stack_map(helpers):
    """x_L = x_{l+1} for the last block l; earlier layers see the rest of the stack (jacfwd of stack_fn would
    cost two more compiles: target="final" only swaps block_fn for normjax.stack_fn, tested in tests/test_model.py)."""
    model = helpers.model()
    final = jacobian_lens.mean_block_jacobians(model, batches(), target="final", positions=[0, 2, 3])
    block = jacobian_lens.mean_block_jacobians(model, batches(), target="block", positions=[0, 2, 3])
    np.testing.assert_allclose(final.jacobians[-1], block.jacobians[-1], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(final.std[-1], block.std[-1], rtol=1e-10, atol=1e-14)
    assert np.abs(final.jacobians[0] - block.jacobians[0]).max() > 1e-2
    assert final.metadata["target"] == "final" and "x_L" in final.metadata["definition"]


def test_round_trip_is_exact_and_the_file_self_describing(helpers, tmp_path):
    lens = jacobian_lens.mean_block_jacobians(helpers.model(), batches())
    path = str(tmp_path / "lens.npz")
    lens_file.save(path, lens)
    back = lens_file.load(path)
    for name in ("jacobians", "std", "layers"):
        np.testing.assert_array_equal(getattr(back, name), getattr(lens, name))
    assert back.count == lens.count and back.jacobians.dtype == np.float64
    assert {k: v for k, v in back.metadata.items() if k in lens.metadata} == json.loads(json.dumps(lens.metadata))
    with np.load(path) as npz:  # readable by plain NumPy, no pickle
        assert json.loads(str(npz["metadata"]))["format"] == "normjax.jacobian_lens"
    lens_file.save(path, lens, dtype="float32")
    np.testing.assert_array_equal(lens_file.load(path).jacobians, lens.jacobians.astype(np.float32))
    assert not [n for n in os.listdir(tmp_path) if n.startswith(io.TMP_PREFIX)]


def test_damaged_files_give_clear_errors(helpers, tmp_path):
    lens = jacobian_lens.mean_block_jacobians(helpers.model(), batches()[:1])
    path = str(tmp_path / "lens.npz")
    lens_file.save(path, lens)
    with open(path, "rb") as f:
        data = f.read()
    for name, content in (("truncated", data[: len(data) // 2]), ("text", b"not a lens\n")):
        bad = tmp_path / f"{name}.npz"
        bad.write_bytes(content)
        with pytest.raises(io.CorruptFileError, match="not a readable normjax Jacobian lens file"):
            lens_file.load(str(bad))
    with np.load(path) as npz:  # an edited array, the old metadata and its checksum kept
        arrays = {k: npz[k] for k in npz.files}
    arrays["jacobians"] = arrays["jacobians"] + 1e-9
    buffer = bytes_io.BytesIO()
    np.savez(buffer, **arrays)
    (tmp_path / "edited.npz").write_bytes(buffer.getvalue())
    with pytest.raises(io.ChecksumError, match="edited or damaged"):
        lens_file.load(str(tmp_path / "edited.npz"))
    os.symlink(path, tmp_path / "link.npz")
    with pytest.raises(io.WorkdirError, match="symbolic link"):
        lens_file.save(str(tmp_path / "link.npz"), lens)


def test_bad_arguments_are_refused(helpers):
    model = helpers.model()
    with pytest.raises(ValueError, match="no sample"):
        jacobian_lens.mean_block_jacobians(model, [])
    with pytest.raises(ValueError, match="positions"):
        jacobian_lens.mean_block_jacobians(model, batches()[:1], positions=[T])
    with pytest.raises(ValueError, match="kind"):
        jacobian_lens.mean_block_jacobians(model, batches()[:1], kind="full")
    with pytest.raises(ValueError, match="several streams"):
        jacobian_lens.mean_block_jacobians(helpers.model(placement="resi_dual"), batches()[:1])
