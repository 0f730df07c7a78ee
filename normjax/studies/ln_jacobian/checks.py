"""ln_jacobian checks: autodiff spectral norms of the model's norm (X4) and block wirings (X1)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import normjax
from normjax.jacobian import norm_jacobians
from normjax.probes import model_probes


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _autodiff(kind: str, d: int, eps: float, scale_ND, z_ND):
    """J (N, d, d): jax.jacfwd of the model's own norm layer (scale gamma) at each z."""
    norm = normjax.make_norm(kind, d, eps=eps)
    graphdef, scale, rest = nnx.split(norm, nnx.PathContains("scale"), ...)

    def apply(scale_D, z_D):
        return nnx.merge(graphdef, jax.tree.map(lambda _: scale_D, scale), rest)(z_D)

    # lax.map, not vmap: on CPU (jax 0.10.2) jit(vmap(jacfwd(LayerNorm))) gave wrong Jacobians for
    # all but the first rows once the output reached 2^19 entries (32 x 128 x 128); one vector per
    # step is correct (tests/studies/test_ln_jacobian.py checks a large batch against the formula).
    return jax.lax.map(lambda a: jax.jacfwd(apply, argnums=1)(*a), (scale_ND, z_ND))


def _top_singular_value(J_NDD) -> np.ndarray:
    """||J||_2 per matrix by a full SVD (LAPACK on the host: XLA's batched SVD compiles slowly)."""
    return np.linalg.svd(np.asarray(J_NDD, np.float64), compute_uv=False)[:, 0]


def _site_inputs(model, sp, num_tokens: int):
    """([(layer or "final", site, z (num_tokens, d), gamma (d,))]: the first tokens of sequence 0 at every
    full-width site, [(layer, site)] of the per-head sites left out)."""
    layers = normjax.layer_params(nnx.state(model, nnx.Param), model, "encoder")
    ones = jnp.ones((model.cfg.d_model,))
    out, per_head = [], []
    for l, inputs in enumerate(sp.norm_inputs):
        for site, z_BTD in inputs.items():
            if z_BTD.ndim == 4:  # per head (B, T, H, d/H)
                per_head.append((l, site))
                continue
            scale = layers[l].get(f"{model_probes.norm_module_name(site, layers[l])}/scale", ones)
            out.append((l, site, z_BTD[0, :num_tokens], scale))
    if sp.final_norm_input is not None:
        out.append(("final", "final", sp.final_norm_input[0, :num_tokens], ones))
    return out, per_head


def _rel_err(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def autodiff_spectral(model, sp, num_tokens: int, gamma_noise: float) -> dict:
    """Closed-form ||dLN/dz||_2 = max|gamma|/sigma vs the largest singular value of the autodiff J.

    At the model's gamma (1 at init) the closed form is exact; with gamma = 1 + gamma_noise N(0, 1)
    it is only an upper bound, so the ratio autodiff / closed form (<= 1) is reported, and the
    closed-form matrix (1/sigma) diag(gamma) P is compared with the autodiff matrix as well.

    Per-head sites (QKV-norm, width d/H) are left out here and listed in "per_head_sites_skipped";
    `model_probes.check_ln_jacobian_autodiff` (the study's matrix check) covers them.

    Returns:
      {"max_rel_err": spectral norms at the model's gamma, "per_layer": {site: (L,) mean autodiff
      norm}, "noisy_gamma": {"matrix_rel_err", "ratio_min", "ratio_mean", "ratio_max"}, "num_vectors": int,
      "per_head_sites_skipped": [(layer, site)]}.
    """
    cfg = model.cfg
    if cfg.norm != "layernorm":
        raise ValueError(f"ln_jacobian checks LayerNorm; the model has norm={cfg.norm!r}")
    entries, per_head = _site_inputs(model, sp, num_tokens)
    z_ND = jnp.concatenate([z for _, _, z, _ in entries])
    scale_ND = jnp.concatenate([jnp.broadcast_to(g, z.shape) for _, _, z, g in entries])
    s_N = _top_singular_value(_autodiff(cfg.norm, cfg.d_model, cfg.norm_eps, scale_ND, z_ND))
    closed_N = norm_jacobians.layernorm_jacobian_norm(z_ND, scale_ND, cfg.norm_eps).value
    noisy_ND = 1.0 + gamma_noise * jax.random.normal(jax.random.key(7), z_ND.shape)
    J_NDD = _autodiff(cfg.norm, cfg.d_model, cfg.norm_eps, noisy_ND, z_ND)
    s_noisy_N = _top_singular_value(J_NDD)
    J_closed_NDD = norm_jacobians.layernorm_jacobian(z_ND, noisy_ND, cfg.norm_eps)
    bound_N = norm_jacobians.layernorm_jacobian_norm(z_ND, noisy_ND, cfg.norm_eps).value
    ratio_N = np.asarray(s_noisy_N / bound_N)
    s_KT = np.asarray(s_N).reshape(len(entries), -1)
    per_layer = {}
    for (l, site, _, _), s_T in zip(entries, s_KT, strict=True):
        if l != "final":
            per_layer.setdefault(site, [None] * len(sp.norm_inputs))[l] = float(s_T.mean())
    return {
        "max_rel_err": _rel_err(s_N, closed_N),
        "per_layer": per_layer,
        "noisy_gamma": {
            "matrix_rel_err": _rel_err(J_closed_NDD, J_NDD),
            "ratio_min": float(ratio_N.min()),
            "ratio_mean": float(ratio_N.mean()),
            "ratio_max": float(ratio_N.max()),
            "gamma_noise": gamma_noise,
        },
        "num_vectors": int(z_ND.shape[0]),
        "per_head_sites_skipped": per_head,
    }


def layernorm(z_BTD, scale, bias, eps: float):
    """LayerNorm written from its formula: gamma * (z - mean) / sqrt(var + eps) + beta."""
    centered = z_BTD - z_BTD.mean(-1, keepdims=True)
    return centered / jnp.sqrt(jnp.mean(centered**2, -1, keepdims=True) + eps) * scale + bias


def _mlp(p: dict, h_BTD, activation: str):
    act = jax.nn.relu if activation == "relu" else jax.nn.gelu
    hidden = act(h_BTD @ p["ffn/fc1/kernel"] + p["ffn/fc1/bias"])
    return hidden @ p["ffn/fc2/kernel"] + p["ffn/fc2/bias"]


def _block_checks(placement: str, p: dict, x, x_next, n: dict, F: dict, cfg) -> dict:
    """{check: (computed, recorded)} of one block: Post-LN LN(x + F(x)), Pre-LN x + F(LN(x))."""
    ln = lambda z, sub: layernorm(z, p[f"{sub}/norm/scale"], p[f"{sub}/norm/bias"], cfg.norm_eps)
    if placement == "post":
        h = ln(n["attn.post"], "attn")
        return {
            "attn LN input = x + F(x)": (x + F["attn"], n["attn.post"]),
            "ffn LN input = h + F(h)": (h + F["ffn"], n["ffn.post"]),
            "block output = LN(h + F(h))": (ln(n["ffn.post"], "ffn"), x_next),
            "F_ffn input = h (un-normalized)": (_mlp(p, h, cfg.activation), F["ffn"]),
        }
    if placement == "pre":
        h = x + F["attn"]
        return {
            "attn LN input = x": (x, n["attn.pre"]),
            "ffn LN input = h": (h, n["ffn.pre"]),
            "block output = h + F(LN(h))": (h + F["ffn"], x_next),
            "F_ffn input = LN(h)": (_mlp(p, ln(h, "ffn"), cfg.activation), F["ffn"]),
        }
    raise ValueError(f"the wiring check covers post and pre, got {placement!r}")


def wiring_errors(model, tokens_BT) -> dict:
    """Every block rebuilt from the recorded streams, norm inputs and branch outputs.

    Returns:
      {"max_abs_err", "max_abs_value", "per_check": {check: max abs err over blocks},
      "has_final_norm": bool, "final_input_err": |final norm input - x_L| or None}.
    """
    cfg = model.cfg
    sp = normjax.probe(model, tokens_BT)[1]["encoder"]
    layers = normjax.layer_params(nnx.state(model, nnx.Param), model, "encoder")
    per_check, biggest = {}, 0.0
    for l, placement in enumerate(cfg.layer_placements("encoder")):
        checks = _block_checks(
            placement, layers[l], sp.streams[l], sp.streams[l + 1], sp.norm_inputs[l], sp.branch_outputs[l], cfg
        )
        for name, (computed, recorded) in checks.items():
            err = float(jnp.max(jnp.abs(computed - recorded)))
            per_check[name] = max(per_check.get(name, 0.0), err)
            biggest = max(biggest, float(jnp.max(jnp.abs(recorded))))
    final = sp.final_norm_input
    final_err = None if final is None else float(jnp.max(jnp.abs(final - sp.streams[-1])))
    return {
        "max_abs_err": max(per_check.values()),
        "max_abs_value": biggest,
        "per_check": per_check,
        "has_final_norm": final is not None,
        "final_input_err": final_err,
    }
