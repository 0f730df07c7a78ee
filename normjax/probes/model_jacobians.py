"""Jacobian probes of a model on one sequence: per block, per sublayer, end to end, x_0 -> x_L."""

import jax.numpy as jnp
import numpy as np

import normjax
from normjax.jacobian import exact, spectral
from normjax.probes.model_probes import run_probe


def one_sequence(inputs, masks, index: int):
    """The inputs and masks of sequence `index` of the batch, as a batch of one."""
    inputs = tuple(x[index : index + 1] for x in inputs)
    masks = {k: None if v is None else v[index : index + 1] for k, v in masks.items()}
    return inputs, masks


def sublayer_names(model, stack: str) -> tuple[str, ...]:
    """The sublayers of every block of `stack`, in call order."""
    return ("attn", "cross", "ffn") if model.cfg.has_cross_attention(stack) else ("attn", "ffn")


def _streams_and_contexts(model, inputs, masks, sequence, stacks):
    """{stack: ([x_0 .. x_L] each (T, D), BlockContext)} for one sequence."""
    inputs, masks = one_sequence(inputs, masks, sequence)
    probes = run_probe(model, inputs, masks)
    stacks = normjax.stack_names(model) if stacks is None else stacks
    return {
        stack: ([x[0] for x in probes[stack].streams], normjax.block_context(model, *inputs, stack=stack, **masks))
        for stack in stacks
    }


def block_jacobian_norms(
    model,
    *inputs,
    sequence: int = 0,
    stacks=None,
    method: str = "auto",
    num_iters: int | None = None,
    tol: float | None = None,
    **masks,
) -> dict:
    """||d x_{l+1} / d x_l||_2 of every block, and of every sublayer map x -> x after it.

    The Jacobians are over one whole sequence (n = T * d inputs, padded positions included), at
    the streams the model produces on it, for `stacks` (default all); `method` etc. as in
    `jacobian.spectral_norm` ("auto":
    exact up to `jacobian.AUTO_EXACT_MAX_ENTRIES` entries, Lanczos above). The block's Jacobian
    is the product of its sublayers' Jacobians, so "block" <= the product of the sublayer norms.

    Returns:
      {stack: {"block": (L,), "attn": (L,), ["cross": (L,),] "ffn": (L,), "methods": [str]}}.
    """
    kw = dict(method=method, num_iters=num_iters, tol=tol, return_info=True)
    out = {}
    for stack, (streams, ctx) in _streams_and_contexts(model, inputs, masks, sequence, stacks).items():
        names = ("block",) + sublayer_names(model, stack)
        norms, methods = {name: [] for name in names}, set()
        for i in range(normjax.num_blocks(model, stack)):
            x_TD = streams[i]
            s, info = spectral.spectral_norm(normjax.block_fn(model, i, stack, ctx), x_TD, **kw)
            norms["block"].append(float(s))
            methods.add(info.method)
            for sub in names[1:]:
                g = normjax.sublayer_fn(model, i, sub, stack, ctx)
                s, info = spectral.spectral_norm(g, x_TD, **kw)
                norms[sub].append(float(s))
                methods.add(info.method)
                x_TD = g(x_TD)
        out[stack] = {name: np.array(v) for name, v in norms.items()} | {"methods": sorted(methods)}
    return out


def jacobian_summary(f, x, *, method: str = "auto", num_probes: int = 64, top_k: int | None = None, key=None) -> dict:
    """Spectral norm, ||J||_F^2 and top singular values of the Jacobian of f: (T, D) -> (T, D).

    When `method` resolves to "exact", J is materialized once and everything is exact (all
    singular values). Otherwise the spectral norm uses `method`, ||J||_F^2 is a Hutchinson
    estimate (`num_probes` JVPs; "frobenius_sq_stderr" is its standard error) and `top_k`
    singular values (if asked) come from Lanczos.
    """
    if spectral.resolve_method(method, x.size, x.size) == "exact":
        s = spectral.singular_values(f, x, method="exact")
        return {
            "spectral": float(s[0]),
            "frobenius_sq": float(jnp.sum(s**2)),
            "frobenius_sq_stderr": 0.0,
            "singular_values": np.asarray(s),
            "exact": True,
        }
    fro, info = spectral.frobenius_norm_sq(f, x, num_probes=num_probes, key=key, return_info=True)
    out = {"frobenius_sq": float(fro), "frobenius_sq_stderr": info.stderr, "exact": False}
    if top_k:
        top = spectral.singular_values(f, x, min(top_k, x.size), method="lanczos", key=key)
        out["singular_values"] = np.asarray(top)
    if top_k and method in ("auto", "lanczos"):
        out["spectral"] = float(top[0])  # the same Lanczos run, no second one for k = 1
    else:
        out["spectral"] = float(spectral.spectral_norm(f, x, method=method, key=key))
    return out


def end_to_end_jacobians(
    model,
    *inputs,
    sequence: int = 0,
    stacks=None,
    method: str = "auto",
    num_probes: int = 64,
    top_k: int = 32,
    key=None,
    return_io_jacobian: bool = False,
    **masks,
) -> dict:
    """Norms of d x_L / d x_l for every l, and the singular values of d x_L / d x_0.

    x_L is the stream leaving the last block (before any final norm), on one sequence (n = T d).
    See `jacobian_summary`: exact (all n singular values, exact ||J||_F^2) when the n x n Jacobian
    fits `jacobian.AUTO_EXACT_MAX_ENTRIES` (or method="exact"), else matrix-free with a Hutchinson
    ||J||_F^2 and the top `top_k` singular values of d x_L / d x_0.

    Returns:
      {stack: {"spectral": (L,), "frobenius_sq": (L,), "frobenius_sq_stderr": (L,),
      "io_singular_values": (n,) or (top_k,), "exact": bool}}, index l meaning d x_L / d x_l;
      with `return_io_jacobian`, also "io_jacobian": d x_L / d x_0 as an (n, n) array (n^2
      entries; when the spectrum was exact it reuses that compiled program).
    """
    keys = ("spectral", "frobenius_sq", "frobenius_sq_stderr")
    out = {}
    for stack, (streams, ctx) in _streams_and_contexts(model, inputs, masks, sequence, stacks).items():
        fns = [
            normjax.stack_fn(model, start=i, stack=stack, context=ctx) for i in range(normjax.num_blocks(model, stack))
        ]
        rows = [
            jacobian_summary(
                f, streams[i], method=method, num_probes=num_probes, top_k=top_k if i == 0 else None, key=key
            )
            for i, f in enumerate(fns)
        ]
        out[stack] = {k: np.array([r[k] for r in rows]) for k in keys} | {
            "io_singular_values": rows[0]["singular_values"],
            "exact": rows[0]["exact"],
        }
        if return_io_jacobian:
            out[stack]["io_jacobian"] = np.asarray(exact.jacobian(fns[0], streams[0]))
    return out
