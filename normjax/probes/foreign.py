"""The model probes of any model given as a list of block functions (equinox, haiku, Linen, NNX, plain JAX)."""

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from normjax.jacobian import exact, spectral, traced
from normjax.probes.model_jacobians import jacobian_summary
from normjax.probes.model_probes import summarize


def _calls(blocks: Sequence[Callable], params: Sequence | None) -> list[tuple[Callable, object]]:
    """[(f_l, params_l)], params_l None for blocks x -> x; ValueError on an empty list or mismatched params."""
    blocks = list(blocks)
    if not blocks:
        raise ValueError("blocks is empty: pass [f_0, ..., f_{L-1}], each x_l -> x_{l+1}.")
    if params is None:
        return [(f, None) for f in blocks]
    params = list(params)
    if len(params) != len(blocks):
        raise ValueError(f"params has {len(params)} entries for {len(blocks)} blocks: one per block, or params=None.")
    return list(zip(blocks, params, strict=True))


def streams(blocks: Sequence[Callable], x, params: Sequence | None = None) -> list:
    """[x_0, ..., x_L]: x_{l+1} = blocks[l](x_l), or blocks[l](params[l], x_l) with `params`.

    Each block runs through `jacobian.evaluate` (compiled once per block structure, current values read).
    An nnx.Module is a block too (called as module(x)).
    """
    out = [x]
    for f, p in _calls(blocks, params):
        out.append(traced.evaluate(f, out[-1], p))
    return out


def stream_norms(blocks: Sequence[Callable], x, params: Sequence | None = None) -> dict:
    """||x_l||^2 / d per token (x an array, its last axis d) for l = 0..L: {"mean": (L+1,), "std": (L+1,)} over every
    token of x (all leading axes), as `model_probes.stream_norms` reports one stack."""
    stats = []
    for x_l in streams(blocks, x, params):
        ms = np.mean(np.square(np.asarray(x_l, np.float64)), axis=-1)  # on the host: no eager compiles
        stats.append(summarize(ms, np.ones(ms.shape, bool)))
    return {k: np.array([s[k] for s in stats]) for k in ("mean", "std")}


def block_jacobian_norms(
    blocks: Sequence[Callable],
    x,
    params: Sequence | None = None,
    *,
    method: str = "auto",
    num_iters: int | None = None,
    tol: float | None = None,
) -> dict:
    """||d x_{l+1} / d x_l||_2 of every block at the streams the blocks produce from x.

    The Jacobian of block l is (x_l.size, x_l.size): pass x as one sequence. `method` etc. as in
    `jacobian.spectral_norm` ("auto": exact up to `jacobian.AUTO_EXACT_MAX_ENTRIES` entries, Lanczos above);
    blocks of one structure share one compiled program.

    Returns:
      {"block": (L,), "methods": [str]}.
    """
    xs = streams(blocks, x, params)
    kw = dict(method=method, num_iters=num_iters, tol=tol, return_info=True)
    norms, methods = [], set()
    for (f, p), x_l in zip(_calls(blocks, params), xs, strict=False):
        s, info = spectral.spectral_norm(f, x_l, params=p, **kw)
        norms.append(float(s))
        methods.add(info.method)
    return {"block": np.array(norms), "methods": sorted(methods)}


def compose(blocks: Sequence[Callable], params: Sequence | None = None, start: int = 0):
    """(f, params) of x_start -> x_L through blocks start..L-1, for `normjax.jacobian` (f(params, x) form)."""
    calls = _calls(blocks, params)[start:]

    def f(ps, x):
        for (g, _), p in zip(calls, ps, strict=True):
            x = g(x) if p is None else g(p, x)
        return x

    return f, tuple(p for _, p in calls)


def end_to_end_jacobians(
    blocks: Sequence[Callable],
    x,
    params: Sequence | None = None,
    *,
    method: str = "auto",
    num_probes: int = 64,
    top_k: int = 32,
    key=None,
) -> dict:
    """Norms of d x_L / d x_l for every l, and the singular values of d x_L / d x_0 (`jacobian_summary`).

    Exact when the Jacobian fits `jacobian.AUTO_EXACT_MAX_ENTRIES` (or method="exact"): every block's Jacobian
    once (one compile per block structure), their products d x_L / d x_l = J_{L-1} ... J_l in float64 on the
    host, and their SVDs. Else matrix-free, with a Hutchinson ||J||_F^2 and the top `top_k` singular values;
    blocks of one structure then run as one program over their stacked arrays, started at l by a traced index
    (one compile for every l), others as L compositions.

    Returns:
      {"spectral": (L,), "frobenius_sq": (L,), "frobenius_sq_stderr": (L,), "io_singular_values": (n,) or
      (top_k,), "exact": bool}, index l meaning d x_L / d x_l.
    """
    xs = streams(blocks, x, params)
    calls = _calls(blocks, params)
    size = ravel_pytree(xs[0])[0].size
    if spectral.resolve_method(method, size, ravel_pytree(xs[-1])[0].size) == "exact":
        return _exact_products(calls, xs)
    starts = _one_program(calls, xs) or [compose(blocks, params, l) for l in range(len(calls))]
    rows = []
    for l, (f, ps) in enumerate(starts):
        summary_kw = dict(method=method, num_probes=num_probes, top_k=top_k if l == 0 else None, key=key)
        # ps as the model of a Call: its arrays are arguments of the program (a closed-over start index could be
        # inlined into the traced program as a literal, one compile per start).
        rows.append(jacobian_summary(traced.with_call(ps, lambda ps, x, f=f: f(ps, x)), xs[l], **summary_kw))
    return _table(rows)


def _table(rows: list[dict]) -> dict:
    keys = ("spectral", "frobenius_sq", "frobenius_sq_stderr")
    return {k: np.array([r[k] for r in rows]) for k in keys} | {
        "io_singular_values": rows[0]["singular_values"],
        "exact": rows[0]["exact"],
    }


def _exact_products(calls, xs) -> dict:
    """The exact rows from the blocks' own Jacobians: d x_L / d x_l = J_{L-1} ... J_l (chain rule)."""
    J_l = [exact.jacobian(f, x_l, params=p) for (f, p), x_l in zip(calls, xs, strict=False)]
    dtype = J_l[0].dtype
    P_MN = np.eye(J_l[-1].shape[0])
    rows = []
    for J_MN in reversed(J_l):
        P_MN = P_MN @ np.asarray(J_MN, np.float64)
        s = np.linalg.svd(P_MN, compute_uv=False)
        fro = float(np.sum(s**2))
        rows.append({"spectral": float(s[0]), "frobenius_sq": fro, "frobenius_sq_stderr": 0.0, "exact": True})
        rows[-1]["singular_values"] = s.astype(dtype)
    return _table(rows[::-1])


def _one_program(calls, xs) -> list | None:
    """[(f, ps_l)] with one f for every start l when all blocks share one structure (and map x to its own
    shape): f(ps, x) runs every block over the stacked arrays and keeps block i's output only for i >= start.
    None when they differ."""
    convs = [traced.convert(f, x_l, p) for (f, p), x_l in zip(calls, xs, strict=False)]
    fn = convs[0].fn
    same = all(c.fn == fn and len(c.args) == len(convs[0].args) for c in convs)
    if not same or any(c.out_size != c.x_N.size for c in convs):
        return None
    if any(jnp.shape(a) != jnp.shape(b) for c in convs for a, b in zip(c.args, convs[0].args, strict=True)):
        return None
    stacked = tuple(np.stack(arrays) for arrays in zip(*(c.args for c in convs), strict=True))  # host: no compile
    x_dtype, unravel = ravel_pytree(xs[0])[0].dtype, convs[0].unravel_x

    def run(ps, x):
        stacked, start_1 = ps
        x_N = ravel_pytree(x)[0].astype(fn.dtype)

        def step(x_N, inputs):
            i, args = inputs
            return jnp.where(i >= start_1[0], fn(args, x_N), x_N), None

        x_N = jax.lax.scan(step, x_N, (jnp.arange(len(convs)), stacked))[0]
        return unravel(x_N.astype(x_dtype))

    return [(run, (stacked, np.full((1,), l, np.int32))) for l in range(len(convs))]
