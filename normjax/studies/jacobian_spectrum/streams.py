"""The composite residual mapping prod_l H_res^l of hyper-connected stacks (N2): its spectral norm over depth."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import normjax

STACK = "encoder"
PERTURBATION = 0.1  # std of the N(0, PERTURBATION^2) noise added to every static H_res logit (a stand-in for drift)


def _perturb(model, seed: int) -> None:
    """Adds N(0, PERTURBATION^2) to every sublayer's static H_res (`res`, the logits for mHC), in place."""
    state = nnx.state(model, nnx.Param)
    flat = nnx.to_flat_state(state)
    keys = jax.random.split(jax.random.key(5000 + seed), len(flat))
    for key, (path, var) in zip(keys, flat, strict=True):
        if path[-2:] == ("hyper", "res"):
            var.set_value(var.get_value() + PERTURBATION * jax.random.normal(key, var.get_value().shape))
    nnx.update(model, state)


def residual_mappings(model, x_BTD) -> list[np.ndarray]:
    """H_res (n, n) of every sublayer in stack order, from the model's own HyperConnection.matrices on the
    stacked input streams (its dynamic part reads them; at init it is zero, so every token gets the same H_res:
    the first token's is returned)."""
    st = model.stacks[STACK]
    x_BTND = jnp.stack([x_BTD] * st.hyper_streams, axis=-2)
    out = []
    for l in range(normjax.num_blocks(model, STACK)):
        for sub in st.block(l).sublayers():
            h_res = np.asarray(sub.hyper.matrices(x_BTND)[2], np.float64)
            out.append(h_res.reshape(-1, st.hyper_streams, st.hyper_streams)[0])
    return out


def composite(mappings: list[np.ndarray]) -> dict:
    """Spectral norm of P = H_K ... H_1 and of each H, with the bound sqrt(||P||_1 ||P||_inf) >= ||P||_2 (max
    column sum times max row sum; for column-stochastic P the bound is sqrt(max row sum))."""
    P = np.eye(mappings[0].shape[0])
    for H in mappings:
        P = H @ P
    col, row = np.abs(P).sum(0).max(), np.abs(P).sum(1).max()
    return {
        "spectral": float(np.linalg.norm(P, 2)),
        "bound": float(np.sqrt(col * row)),
        "max_single": float(max(np.linalg.norm(H, 2) for H in mappings)),
        "min_entry": float(min(H.min() for H in mappings)),
        "max_col_sum_error": float(max(np.abs(H.sum(0) - 1).max() for H in mappings)),
        "max_row_sum_error": float(max(np.abs(H.sum(1) - 1).max() for H in mappings)),
    }


def measure_streams(model_config, inputs, seed: int) -> dict:
    """N2 at one (placement, depth, seed): the composite at init and after perturbing the static H_res."""
    model = normjax.Transformer(model_config, rngs=nnx.Rngs(seed))
    x = normjax.embed(model, *inputs, STACK)[0]
    out = {"init": composite(residual_mappings(model, x))}
    _perturb(model, seed)
    out["perturbed"] = composite(residual_mappings(model, x))
    return out
