"""Per-layer Jacobians of a model averaged over data (a Jacobian lens): mean, spread and count per layer."""

import dataclasses
import functools
import hashlib

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import normjax
from normjax.jacobian import checks, exact
from normjax.probes.model_probes import run_probe, token_mask

KINDS = ("transport", "position")  # see `mean_block_jacobians`
TARGETS = ("block", "final")


@dataclasses.dataclass(frozen=True)
class MeanJacobians:
    """Data-averaged per-layer Jacobians (what `lens_file.save` writes and `lens_file.load` returns).

    Attributes:
      jacobians: (L, D, D), jacobians[i] the mean of the (D_out, D_in) samples at source layer layers[i].
      std: (L, D, D), their elementwise population standard deviation (ddof=0); standard error std / sqrt(count).
      count: the number of (sequence, position) samples averaged at every layer.
      layers: (L,) source layers l: the stream x_l entering block l (x_0 the embeddings).
      metadata: JSON-able dict: model config, placement, kind, target, positions, data hash, dtypes, versions.
    """

    jacobians: np.ndarray
    std: np.ndarray
    count: int
    layers: np.ndarray
    metadata: dict


@functools.partial(jax.jit, static_argnames=("fn", "kind", "shape", "chunk_size"))
def _batch_stats(fn, args, x_N, w_BT, idx_P, kind, shape, chunk_size):
    """(n, mean_DD, m2_DD, #non-finite) of one batch's weighted (D, D) Jacobian samples."""
    B, T, D = shape
    g = functools.partial(fn, args)
    if kind == "transport":  # D VJPs: cotangent e_j at every weighted target position of every sequence
        J_DN, y_N = exact.flat_jacobian(lambda z: jnp.einsum("bt,btd->d", w_BT, g(z).reshape(B, T, D)), x_N, "rev")
        J_SDD, w_S = J_DN.reshape(D, B * T, D).transpose(1, 0, 2), w_BT.reshape(-1)
    else:  # D JVPs per position: tangent e_i at position t of every sequence (sequences are independent)
        y_N, jvp = jax.linearize(g, x_N)

        def at(t):
            def column(i):
                return jvp(jnp.zeros((B, T, D), x_N.dtype).at[:, t, i].set(1).reshape(-1)).reshape(B, T, D)[:, t]

            return jax.lax.map(column, jnp.arange(D), batch_size=chunk_size or D)  # (D_in, B, D_out)

        J_PIBO = jax.lax.map(at, idx_P)
        J_SDD, w_S = J_PIBO.transpose(2, 0, 3, 1).reshape(-1, D, D), w_BT[:, idx_P].reshape(-1)
    n = jnp.sum(w_S)
    mean_DD = jnp.einsum("s,sij->ij", w_S, J_SDD) / jnp.maximum(n, 1)
    m2_DD = jnp.einsum("s,sij->ij", w_S, (J_SDD - mean_DD) ** 2)
    return n, mean_DD, m2_DD, checks.count_nonfinite(y_N) + checks.count_nonfinite(J_SDD)


def _merge(acc, n, mean, m2):
    """Chan et al.'s pairwise update of (count, mean, M2), in float64."""
    if acc is None:
        return n, mean, m2
    n0, mean0, m20 = acc
    total = n0 + n
    if total == 0:
        return acc
    delta = mean - mean0
    return total, mean0 + delta * (n / total), m20 + m2 + delta**2 * (n0 * n / total)


def _as_batch(batch):
    """(inputs tuple, masks dict) of a batch: tokens (B, T), or (inputs, masks) as model(*inputs, **masks)."""
    if isinstance(batch, tuple) and len(batch) == 2 and isinstance(batch[1], dict):
        inputs = batch[0] if isinstance(batch[0], tuple) else (batch[0],)
        return inputs, batch[1]
    return (batch,), {}


def _positions(positions, T: int) -> np.ndarray:
    """The sorted positions of a sequence of length T; negative ones count from the end."""
    if positions is None:
        return np.arange(T)
    idx = [int(p) for p in positions]
    if not idx or any(not -T <= p < T for p in idx):
        raise ValueError(f"positions must be non-empty and in [-{T}, {T}) for sequences of length {T}, got {idx}.")
    idx = sorted(p % T for p in idx)
    if len(set(idx)) != len(idx):
        raise ValueError(f"positions name one position twice for length {T}: {positions}.")
    return np.array(idx)


def _hash_update(h, arrays: dict) -> None:
    for name in sorted(arrays):
        a = np.ascontiguousarray(np.asarray(arrays[name]))
        h.update(f"{name}:{a.dtype.str}:{a.shape};".encode())
        h.update(a.tobytes())


def params_sha256(model) -> str:
    """sha256 of the model's parameters (every nnx.Param, in state order): ties a lens to its weights."""
    h = hashlib.sha256()
    for i, leaf in enumerate(jax.tree.leaves(nnx.state(model, nnx.Param))):
        _hash_update(h, {str(i): leaf})
    return h.hexdigest()


def mean_block_jacobians(
    model,
    batches,
    *,
    kind: str = "transport",
    target: str = "block",
    positions=None,
    stack: str | None = None,
    chunk_size: int | None = None,
    stop_gradient: str = "constant",
) -> MeanJacobians:
    """The mean over data of every layer's (D, D) Jacobian, its elementwise std and the sample count.

    A sample is one real (unpadded) position s of one sequence, in `positions` (default all). With x_l the
    stream entering block l and y = x_{l+1} (target="block") or x_L, the last block's output before any final
    norm (target="final", the Jacobian lens's map), the sample at s is
      kind="transport": sum over the same set of positions t of d y_t / d x_{l,s}, the effect of the input at s on
        every output (the Jacobian lens's convention, Gurnee et al. 2026; in a causal stack only t >= s count).
        Per-block transports compose across blocks where the stack's own transport does, up to the averaging.
        Cost per batch: D VJPs.
      kind="position": d y_s / d x_{l,s}, the same-position block (attention's paths between positions left out).
        Cost per batch: D JVPs per position.
    Every sample weighs the same (sequences with more real positions weigh more). Jacobians are backpropagation's
    (`stop_gradient` as in `normjax.jacobian.jacobian`), in the model's working dtype, accumulated in float64.

    Args:
      model: a normjax.Transformer with one residual stream (not ResiDual, hyper-connections or skips).
      batches: iterable of token arrays (B, T), or (inputs, masks) pairs as `model(*inputs, **masks)` takes.
      kind, target: as above.
      positions: positions to average (ints, negative from the end; the same for every sequence), or None.
      stack: the stack (default: the model's last, the decoder).
      chunk_size: kind="position": tangents pushed through one vmap at a time (None: all D).
      stop_gradient: "constant" or "identity", as in `normjax.jacobian.jacobian`.

    Returns:
      A `MeanJacobians` over layers 0..L-1; its metadata describes the data and the model.

    Raises:
      ValueError: a bad argument, no sample, or a model with several streams. FloatingPointError: non-finite
      values. MemoryError: one batch's samples (B T D^2 entries) would not fit.
    """
    if kind not in KINDS or target not in TARGETS:
        raise ValueError(f"kind must be one of {KINDS} and target one of {TARGETS}, got {kind!r}, {target!r}.")
    stack = normjax.stack_names(model)[-1] if stack is None else stack
    cfg = model.cfg
    if cfg.stream_kind(stack) != "one" or cfg.has_skips:
        raise ValueError(f"placement {cfg.placement!r} carries several streams: its blocks map no (D, D) Jacobian.")
    L, data_hash = normjax.num_blocks(model, stack), hashlib.sha256()
    acc, seq_lens, num_sequences, dtype = [None] * L, set(), 0, None
    for batch in batches:
        inputs, masks = _as_batch(batch)
        _hash_update(data_hash, {f"input{i}": a for i, a in enumerate(inputs)} | masks)
        streams, ctx = (
            run_probe(model, inputs, masks)[stack].streams,
            normjax.block_context(model, *inputs, stack=stack, **masks),
        )
        B, T, D = streams[0].shape
        idx_P = _positions(positions, T)
        w_BT = token_mask(model, stack, inputs, masks) & np.isin(np.arange(T), idx_P)[None]
        seq_lens.add(T)
        num_sequences += B
        samples = B * (T if kind == "transport" else len(idx_P))
        for l in range(L):
            if target == "block":
                f = normjax.block_fn(model, l, stack, ctx)
            else:
                f = normjax.stack_fn(model, start=l, stack=stack, context=ctx)
            conv = exact.prepare(f, streams[l], stop_gradient=stop_gradient)
            exact.check_memory(samples * D, D, conv.dtype, what="one batch's Jacobian samples")
            n, mean, m2, bad = _batch_stats(
                conv.fn, conv.args, conv.x_N, jnp.asarray(w_BT, conv.dtype), idx_P, kind, (B, T, D), chunk_size
            )
            checks.raise_if_nonfinite(f"block {l}'s output or Jacobian", bad, samples * D * D)
            acc[l] = _merge(acc[l], float(n), np.asarray(mean, np.float64), np.asarray(m2, np.float64))
            dtype = conv.dtype
    if acc[0] is None or acc[0][0] == 0:
        raise ValueError("no sample: batches is empty or no real token lies in `positions`.")
    count = int(round(acc[0][0]))
    meta = {
        "format": "normjax.jacobian_lens",
        "format_version": 1,
        "kind": kind,
        "target": target,
        "source": "layers[i] = l: x_l, the residual stream entering block l (x_0: the embeddings)",
        "definition": _DEFINITIONS[(kind, target)],
        "std": "elementwise population std (ddof=0) over the count samples; standard error = std / sqrt(count)",
        "stack": stack,
        "placement": cfg.placement,
        "model_config": cfg.to_dict(),
        "params_sha256": params_sha256(model),
        "positions": None if positions is None else [int(p) for p in positions],
        "seq_lens": sorted(seq_lens),
        "num_sequences": num_sequences,
        "data_sha256": data_hash.hexdigest(),
        "jacobian_dtype": str(dtype),
        "stop_gradient": stop_gradient,
        "normjax_version": normjax.__version__,
        "jax_version": jax.__version__,
    }
    return MeanJacobians(
        jacobians=np.stack([a[1] for a in acc]),
        std=np.sqrt(np.stack([a[2] for a in acc]) / count),
        count=count,
        layers=np.arange(L),
        metadata=meta,
    )


_Y = {"block": "x_{l+1}", "final": "x_L (before the final norm)"}
_DEFINITIONS = {
    (kind, target): (
        "jacobians[i][o, j] = mean over samples (sequence, position s) of "
        + (f"sum over positions t of d {_Y[target]}[t, o] / d x_l[s, j]" if kind == "transport" else "")
        + (f"d {_Y[target]}[s, o] / d x_l[s, j]" if kind == "position" else "")
    )
    for kind in KINDS
    for target in TARGETS
}
