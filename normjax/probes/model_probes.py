"""Model probes from one forward pass: residual-stream norms and every norm site's Jacobian norm.

Built only on the public model API (docs/model_api.md). Results are nested dicts of numpy arrays and
floats, ready for `json.dump` after `tolist()`.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import normjax
from normjax.jacobian import norm_jacobians


@functools.partial(jax.jit, static_argnames=("graphdef",))
def _probe(graphdef, state, inputs, masks):
    _, probes = normjax.probe(nnx.merge(graphdef, state), *inputs, **masks)
    return {stack: {f.name: getattr(sp, f.name) for f in dataclasses.fields(sp)} for stack, sp in probes.items()}


def run_probe(model, inputs, masks) -> dict:
    """normjax.probe's {stack: StackProbes}, from a forward pass compiled once per model structure.

    Same values as `normjax.probe(model, *inputs, **masks)[1]`; jit-compiled (with the model
    state as an argument) because an eager forward compiles every operation on its own.
    """
    graphdef, state = nnx.split(model)
    return {
        stack: normjax.StackProbes(**fields) for stack, fields in _probe(graphdef, state, tuple(inputs), masks).items()
    }


def token_mask(model, stack: str, inputs, masks) -> np.ndarray:
    """(B, T) bool of the real tokens entering `stack` (all True without a padding mask)."""
    if model.cfg.arch == "encoder_decoder":
        tokens = inputs[0] if stack == "encoder" else inputs[1]
        mask = masks.get("src_mask" if stack == "encoder" else "tgt_mask")
    else:
        tokens, mask = inputs[0], masks.get("padding_mask")
    return np.ones(np.shape(tokens), bool) if mask is None else np.asarray(mask, bool)


def site_mask(model, stack: str, site: str, inputs, masks) -> np.ndarray:
    """(B, T) bool of the real positions whose vectors enter `site`; cross-attention keys and values
    ("cross.k", "cross.v") are encoder positions, so they use the source mask."""
    return token_mask(model, "encoder" if site in ("cross.k", "cross.v") else stack, inputs, masks)


def summarize(v_BT, mask_BT) -> dict:
    """Mean, std, min and max of a per-token quantity over the real tokens.

    `v_BT` may carry trailing axes (e.g. (B, T, H) per head): the statistics then run over every
    entry of the real tokens.
    """
    v = np.asarray(v_BT, np.float64)[mask_BT]
    return {"mean": float(v.mean()), "std": float(v.std()), "min": float(v.min()), "max": float(v.max())}


def stream_norms(model, *inputs, **masks) -> dict:
    """||x_l||^2 / d per token for every residual stream x_0 .. x_L of every stack.

    Returns:
      {stack: {"mean": (L+1,), "std": (L+1,)}}: over real tokens of all sequences (Xiong et al.'s
      Lemma 2 quantity: about 1 + l/2 .. 1 + 3l/2 for Pre-LN at init, 3/2 at Post-LN norm inputs).
    """
    probes = run_probe(model, inputs, masks)
    out = {}
    for stack, sp in probes.items():
        mask = token_mask(model, stack, inputs, masks)
        stats = [summarize(jnp.mean(jnp.square(x), axis=-1), mask) for x in sp.streams]
        out[stack] = {k: np.array([s[k] for s in stats]) for k in ("mean", "std")}
    return out


def norm_module_name(site: str, layer: dict) -> str:
    """The parameter prefix of the norm at `site` ("attn.pre" -> "attn/norm", ...).

    Roles pre/post use the sublayer's norm; "branch" its second norm where it has one (sandwich)
    and its only norm otherwise (branch_post); q/k/v the attention's QKV-norm.
    """
    sub, role = site.split(".")
    if role in ("q", "k", "v"):
        return f"{sub}/qkv_norm/{role}"
    if role == "branch" and f"{sub}/norm2/scale" in layer:
        return f"{sub}/norm2"
    return f"{sub}/norm"


def _params_at(model, site: str, layer: dict | None) -> dict:
    """Closed-form keyword arguments of the norm at `site`: scale (None = 1), eps, alpha."""
    cfg = model.cfg
    module = None if layer is None else norm_module_name(site, layer)
    layer = layer or {}
    alpha = layer.get(f"{module}/alpha", cfg.dyt_alpha)
    return {"scale": layer.get(f"{module}/scale"), "eps": cfg.norm_eps, "alpha": alpha}


def input_scale(kind: str, z, eps: float):
    """The norm's denominator per token: sigma (layernorm), r (rmsnorm); for dyt, std(z)."""
    if kind == "layernorm":
        return norm_jacobians.layernorm_sigma(z, eps)
    if kind == "rmsnorm":
        return norm_jacobians.rmsnorm_rms(z, eps)
    return jnp.std(z, axis=-1)


def num_heads(z) -> int:
    """1 for a full-width site input (B, T, D); H for a per-head one (B, T, H, D/H), e.g. QK/QKV-norm."""
    if z.ndim not in (3, 4):
        raise ValueError(f"a norm site input is (B, T, D) or per head (B, T, H, D/H), got shape {z.shape}")
    return 1 if z.ndim == 3 else z.shape[2]


def site_closed_form(kind: str, z, params: dict) -> tuple[jax.Array, jax.Array, bool]:
    """(||dN/dz||_2 per token (B, T), sigma per normalized vector, exact) at a site with input z.

    A full-width site (z (B, T, D)) normalizes each token's D entries. A per-head site (z (B, T, H,
    D/H)) normalizes each head's D/H entries with one affine of size D/H, so a token's D -> D
    Jacobian is block diagonal with H blocks: its spectral norm is the largest per-head closed form
    (exact when gamma is constant, an upper bound otherwise), and sigma has shape (B, T, H), one
    denominator per (token, head). `params` as returned for the site: scale, eps, alpha.
    """
    num_heads(z)  # validates the shape
    closed = norm_jacobians.norm_jacobian_norm(kind, z, **params)
    jac_BT = closed.value if z.ndim == 3 else jnp.max(closed.value, axis=-1)
    return jac_BT, input_scale(kind, z, params["eps"]), bool(closed.exact)


def _site_stats(model, z, params, mask) -> dict:
    jac_BT, sigma, exact = site_closed_form(model.cfg.norm, z, params)
    return {
        "sigma": summarize(sigma, mask),
        "jac_norm": summarize(jac_BT, mask),
        "exact": exact,
        "scale_from": "ones" if params["scale"] is None else "params",
        "heads": num_heads(z),
    }


def _sites(model, probes, stack):
    """Yields (layer index or "final", site, input (B, T, D) or per head (B, T, H, D/H), layer params or None)."""
    layers = normjax.layer_params(nnx.state(model, nnx.Param), model, stack)
    for i, inputs in enumerate(probes[stack].norm_inputs):
        for site, z in inputs.items():
            yield i, site, z, layers[i]
    if probes[stack].final_norm_input is not None:
        yield "final", "final", probes[stack].final_norm_input, None


def norm_sites(model, *inputs, **masks) -> dict:
    """At every norm site: the input's scale sigma and the closed-form ||dN/dz||_2 per token.

    The norm kind and eps are model.cfg.norm and model.cfg.norm_eps; gamma (and DyT's alpha) are
    read from `normjax.layer_params` ("attn/norm/scale", ...). The final norm's parameters are not
    exposed by the model API, so it uses gamma = 1 (exact at init) and says so in "scale_from".

    Per-head sites (QK-norm, HybridNorm's QKV-norm: "attn.q", "cross.k", ...; "heads" = H > 1)
    normalize each head's D/H entries: "jac_norm" is still per token, the norm of the token's
    block-diagonal D -> D Jacobian (the largest head's), while "sigma" is per (token, head), its
    statistics taken over every head of every real token. So at one token jac_norm = max|gamma| /
    sigma["min"] for LayerNorm (D/H >= 3) and RMSNorm. Cross-attention keys and values are
    encoder positions and use the source mask.

    Returns:
      {stack: {"layers": [{site: stats} per block], "final": stats or None}}, stats =
      {"sigma": {mean, std, min, max}, "jac_norm": {mean, std, min, max}, "exact": bool,
      "scale_from": str, "heads": int} over real tokens; "exact" is False when jac_norm is an upper
      bound (non-constant gamma).
    """
    probes = run_probe(model, inputs, masks)
    out = {}
    for stack in probes:
        out[stack] = result = {"layers": [{} for _ in probes[stack].norm_inputs], "final": None}
        for i, site, z, layer in _sites(model, probes, stack):
            mask = site_mask(model, stack, site, inputs, masks)
            stats = _site_stats(model, z, _params_at(model, site, layer), mask)
            if i == "final":
                result["final"] = stats
            else:
                result["layers"][i][site] = stats
    return out


def _model_norm(model, params: dict, width: int):
    """The model's own norm layer (normjax.make_norm) of `width` carrying the given scale and alpha."""
    cfg = model.cfg
    norm = normjax.make_norm(
        cfg.norm, width, eps=cfg.norm_eps, dyt_alpha=cfg.dyt_alpha, param_dtype=jnp.dtype(cfg.param_dtype)
    )
    values = {"scale": params["scale"]} if params["scale"] is not None else {}
    if cfg.norm == "dyt":
        values["alpha"] = jnp.asarray(params["alpha"])
    nnx.update(norm, values)
    return norm


def block_diagonal(J):
    """(N, D, D) from per-vector Jacobians (N, D, D) or per-head blocks (N, H, D/H, D/H) on the diagonal."""
    if J.ndim == 3:
        return J
    n, H, k, _ = J.shape
    return jnp.einsum("nhij,hg->nhigj", J, jnp.eye(H, dtype=J.dtype)).reshape(n, H * k, H * k)


def check_ln_jacobian_autodiff(model, *inputs, num_tokens: int = 4, **masks) -> dict:
    """Closed-form norm Jacobians vs `jax.jacfwd` of the model's own norm, on a few real tokens.

    For every site, the first `num_tokens` real tokens' inputs z (d each) give the closed form
    (`norm_jacobians.norm_jacobian`) and the autodiff Jacobian of `normjax.make_norm(cfg.norm, ...)`
    with the site's scale; a mismatch means the model's norm is not the formula (eps placement,
    unbiased variance, ...). At a per-head site the norm (width D/H) is applied to the token's
    (H, D/H) input and its full D x D Jacobian is compared with the block-diagonal closed form.
    Cost O(num_tokens d^2) per site.

    Returns:
      {"max_rel_err": float, stack: {"layers": [{site: rel_err} per block], "final": rel_err or
      None}}, rel_err = max|J_closed - J_autodiff| / max|J_autodiff|.
    """
    probes = run_probe(model, inputs, masks)
    out = {"max_rel_err": 0.0}
    for stack in probes:
        out[stack] = result = {"layers": [{} for _ in probes[stack].norm_inputs], "final": None}
        for i, site, z, layer in _sites(model, probes, stack):
            params = _params_at(model, site, layer)
            z_N = z[jnp.asarray(site_mask(model, stack, site, inputs, masks))][:num_tokens]  # (N, D) or (N, H, D/H)
            n, width = z_N.shape[0], z_N[0].size
            J_auto = jax.vmap(jax.jacfwd(_model_norm(model, params, z_N.shape[-1])))(z_N).reshape(n, width, width)
            J_closed = block_diagonal(norm_jacobians.norm_jacobian(model.cfg.norm, z_N, **params))
            err = float(jnp.max(jnp.abs(J_closed - J_auto)) / jnp.max(jnp.abs(J_auto)))
            if i == "final":
                result["final"] = err
            else:
                result["layers"][i][site] = err
            out["max_rel_err"] = max(out["max_rel_err"], err)
    return out
