"""The model probes of any model given as a list of block functions (equinox, haiku, Linen, NNX, plain JAX)."""

from collections.abc import Callable, Sequence

import numpy as np

from normjax.jacobian import spectral, traced
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

    Exact when the Jacobian fits `jacobian.AUTO_EXACT_MAX_ENTRIES` (or method="exact"), else matrix-free with
    a Hutchinson ||J||_F^2 and the top `top_k` singular values. Each start l is its own composition of L - l
    blocks, so this compiles up to L programs (normjax models share one: `normjax.stack_fn`).

    Returns:
      {"spectral": (L,), "frobenius_sq": (L,), "frobenius_sq_stderr": (L,), "io_singular_values": (n,) or
      (top_k,), "exact": bool}, index l meaning d x_L / d x_l.
    """
    xs = streams(blocks, x, params)
    rows = []
    for l in range(len(xs) - 1):
        f, ps = compose(blocks, params, l)
        rows.append(
            jacobian_summary(
                lambda x, f=f, ps=ps: f(ps, x),
                xs[l],
                method=method,
                num_probes=num_probes,
                top_k=top_k if l == 0 else None,
                key=key,
            )
        )
    keys = ("spectral", "frobenius_sq", "frobenius_sq_stderr")
    return {k: np.array([r[k] for r in rows]) for k in keys} | {
        "io_singular_values": rows[0]["singular_values"],
        "exact": rows[0]["exact"],
    }
