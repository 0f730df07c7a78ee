"""The two branches F of a block: multi-head attention (self / cross, masks, optional inner norms) and the MLP."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx


def dropout(x, rate: float, key):
    """Inverted dropout; `key=None` or rate 0 is the identity."""
    if key is None or rate == 0.0:
        return x
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0).astype(x.dtype)


def _linear(d_in, d_out, init, *, dtype, param_dtype, rngs, use_bias=True):
    return nnx.Linear(
        d_in,
        d_out,
        use_bias=use_bias,
        kernel_init=init,
        bias_init=nnx.initializers.zeros,
        dtype=dtype,
        param_dtype=param_dtype,
        rngs=rngs,
    )


def unit(x, axis=-1):
    """x / ||x|| along `axis` (nGPT's `justnorm`: no epsilon, a zero vector gives NaN, never a silent 0)."""
    return x / jnp.linalg.norm(x, axis=axis, keepdims=True)


def softcap(x, cap: float):
    """cap * tanh(x / cap): |output| < cap, slope 1 at 0 (Gemma 2's soft-capping)."""
    return cap * jnp.tanh(x / cap)


def attention_bias(key_mask_BS, num_queries: int, num_keys: int, *, causal: bool, dtype):
    """Additive mask (B or 1, 1, T, S): 0 where a query may attend, the dtype's minimum elsewhere.

    `key_mask_BS` is True for real tokens (None: no padding). A padded key is never attended to; rows of
    padded queries are left as they are (their outputs are ignored by the loss). None when nothing is masked.
    """
    allowed = None if key_mask_BS is None else key_mask_BS[:, None, None, :]
    if causal:
        tril = jnp.tril(jnp.ones((num_queries, num_keys), bool))[None, None]
        allowed = tril if allowed is None else (allowed & tril)
    if allowed is None:
        return None
    return jnp.where(allowed, 0.0, jnp.finfo(dtype).min).astype(dtype)


def masked_head_logit_max(logits_BHTS, bias_B1TS):
    """(B, H, T): the largest logit of each query and head over the keys `bias_B1TS` allows (those not at the
    dtype's minimum, the masked value of `attention_bias`); -inf for a query with no allowed key."""
    logits_BHTS = logits_BHTS.astype(jnp.promote_types(logits_BHTS.dtype, jnp.float32))
    if bias_B1TS is not None:
        allowed = bias_B1TS > jnp.finfo(bias_B1TS.dtype).min / 2
        logits_BHTS = jnp.where(allowed, logits_BHTS, -jnp.inf)
    return logits_BHTS.max(axis=3)


def masked_logit_max(logits_BHTS, bias_B1TS):
    """(B, T): `masked_head_logit_max` maxed over heads."""
    return masked_head_logit_max(logits_BHTS, bias_B1TS).max(axis=1)


class Attention(nnx.Module):
    """Multi-head scaled dot-product attention with query/key/value/out projections.

    Optional norms inside the branch, each built by `make_norm(width)`: `qkv_norm` names the roles ("q", "k",
    "v") normalised per head over d_model / num_heads (QK-norm, HybridNorm's QKV-norm); `inner_norm` normalises
    the concatenated heads before the output projection (Sub-LN); `head_scale` multiplies each head by a learned
    scalar initialised to 1 before the output projection (NormFormer). `record(site, z)` sees every per-head
    norm input (shape (B, T, H, d_model / H)).

    `qk_full_norm` names the roles ("q", "k") normalised over the full width d_model before the head split (OLMo 2,
    allenai/OLMo-core `src/olmo_core/nn/attention/__init__.py` lines 589-598; recorded as (B, T, D) sites);
    `clip` c clamps q, k and v to [-c, c] right after their projections, before any norm (OLMo-core lines 584-587);
    `logit_softcap` c maps the scaled logits to c tanh(logits / c) before the mask (Gemma 2, google/gemma_pytorch
    `gemma/model.py` lines 324-327).

    `ngpt_scale` (nGPT, its base scale 1/sqrt(d_model)) makes it nGPT's attention, NVIDIA/ngpt `model.py` lines
    94-96 and 128-135: no biases, q and k unit per head times the learned s_qk (stored as base_scale, used as
    s_qk / base_scale), softmax scale sqrt(d_k) instead of 1/sqrt(d_k).

    `logit_stat(m_BT)`, when given, sees the largest attention logit of each query, (B, T): the scaled (and
    soft-capped) score before the mask bias, maxed over heads and over the keys the bias allows (-inf for a
    query with none). Not a norm input: it does not go through `record`, and nothing is computed without it.

    `value_mix(v_BTD)`, when given, replaces the value projection (after `clip`, before any per-head norm) by what
    it returns: the speedrun's value residual (`normjax.skips.mix_value`, wired by `normjax.blocks.Block`).

    `out_gate` ("headwise" | "elementwise") is gated attention (Qiu et al. 2025, arXiv 2505.06708, the G1 position):
    the SDPA output of each head times sigmoid(x W_g + b_g), x the query-side input of the attention, before any
    head scale, inner norm and the output projection; one gate per head (headwise) or per channel (elementwise).
    qiuzh20/gated_attention `modeling_qwen3.py` (commit 49645df) lines 271-276 (the gate as extra columns of
    q_proj, so drawn as W^Q: here its own Linear with the query's init), 304-312 and 355-356; Qwen3-Next
    (transformers `Qwen3NextAttention`) is the elementwise form.

    `head_stat(stats)`, when given, sees {"logit_max": (B, H, T) `masked_head_logit_max`, "first_key_mass":
    (B, H, T) the softmax weight each query puts on key 0 (before attention dropout)}: the per-head max-logit
    metric of QK-Clip and the attention-sink probe. Nothing is computed without it.
    """

    def __init__(
        self,
        d_model,
        num_heads,
        gains,
        *,
        init_fn,
        make_norm=None,
        qkv_norm=(),
        inner_norm=False,
        head_scale=False,
        ngpt_scale=None,
        qk_full_norm=(),
        clip=None,
        logit_softcap=None,
        out_gate=None,
        dtype=jnp.float32,
        param_dtype=jnp.float32,
        rngs,
    ):
        self.num_heads = num_heads
        self.clip, self.logit_softcap = clip, logit_softcap
        self.qk_full_norm = nnx.Dict({n: make_norm(d_model) for n in qk_full_norm}) if qk_full_norm else None
        lin = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs, use_bias=ngpt_scale is None)
        self.query = _linear(d_model, d_model, init_fn(gains["query"]), **lin)
        self.key = _linear(d_model, d_model, init_fn(gains["key"]), **lin)
        self.value = _linear(d_model, d_model, init_fn(gains["value"]), **lin)
        self.out = _linear(d_model, d_model, init_fn(gains["out"]), **lin)
        self.qkv_norm = nnx.Dict({n: make_norm(d_model // num_heads) for n in qkv_norm}) if qkv_norm else None
        self.inner_norm = make_norm(d_model) if inner_norm else None
        self.head_scale = nnx.Param(jnp.ones((num_heads,), param_dtype)) if head_scale else None
        self.ngpt_scale = ngpt_scale
        self.sqk = None if ngpt_scale is None else nnx.Param(jnp.full((d_model,), ngpt_scale, param_dtype))
        gate_width = {None: None, "headwise": num_heads, "elementwise": d_model}[out_gate]
        self.out_gate = None if gate_width is None else _linear(d_model, gate_width, init_fn(gains["query"]), **lin)

    def __call__(
        self,
        x_BTD,
        memory_BSD,
        bias_B1TS,
        *,
        record,
        dropout_rate=0.0,
        key=None,
        logit_stat=None,
        value_mix=None,
        head_stat=None,
    ):
        B, T, D = x_BTD.shape
        H = self.num_heads
        full = {"q": self.query(x_BTD), "k": self.key(memory_BSD), "v": self.value(memory_BSD)}
        if self.clip is not None:
            full = {r: jnp.clip(z, -self.clip, self.clip) for r, z in full.items()}
        if value_mix is not None:
            full["v"] = value_mix(full["v"])
        if self.qk_full_norm is not None:
            for role, norm in self.qk_full_norm.items():
                full[role] = norm(record(role, full[role]))
        heads = {r: z.reshape(B, -1, H, D // H) for r, z in full.items()}
        if self.qkv_norm is not None:
            for role, norm in self.qkv_norm.items():
                heads[role] = norm(record(role, heads[role]))
        if self.sqk is not None:  # nGPT: s_qk * unit(q), s_qk * unit(k)
            sqk = (self.sqk[...] / self.ngpt_scale).astype(heads["q"].dtype).reshape(H, D // H)
            heads["q"], heads["k"] = sqk * unit(heads["q"]), sqk * unit(heads["k"])
        q_BHTK, k_BHSK, v_BHSK = (heads[r].transpose(0, 2, 1, 3) for r in ("q", "k", "v"))
        dt = q_BHTK.dtype
        logits = jnp.einsum("bhtk,bhsk->bhts", q_BHTK, k_BHSK)
        sqrt_dk = jnp.sqrt(D // H).astype(dt)
        logits = logits * sqrt_dk if self.sqk is not None else logits / sqrt_dk  # nGPT: softmax scale sqrt(d_k)
        if self.logit_softcap is not None:
            logits = softcap(logits, self.logit_softcap)
        if logit_stat is not None:
            logit_stat(masked_logit_max(logits, bias_B1TS))
        head_max_BHT = None if head_stat is None else masked_head_logit_max(logits, bias_B1TS)
        if bias_B1TS is not None:
            logits = logits + bias_B1TS
        softmax_dtype = jnp.promote_types(dt, jnp.float32)  # never softmax in 16 bits
        probs = jax.nn.softmax(logits.astype(softmax_dtype), axis=-1)
        if head_stat is not None:
            head_stat({"logit_max": head_max_BHT, "first_key_mass": probs[..., 0]})
        probs = dropout(probs.astype(dt), dropout_rate, key)
        out_BTHK = jnp.einsum("bhts,bhsk->bthk", probs, v_BHSK)
        if self.out_gate is not None:  # gated attention: sigmoid gate on each head's SDPA output
            g_BTHG = jax.nn.sigmoid(self.out_gate(x_BTD)).reshape(B, T, H, -1)
            out_BTHK = out_BTHK * g_BTHG.astype(dt)
        if self.head_scale is not None:
            out_BTHK = out_BTHK * self.head_scale[...].astype(dt)[:, None]
        out_BTD = out_BTHK.reshape(B, T, D)
        if self.inner_norm is not None:
            out_BTD = self.inner_norm(out_BTD)
        return self.out(out_BTD)


class MLP(nnx.Module):
    """fc2(act(fc1(x))), the position-wise feed-forward branch; `inner_norm` normalises act(fc1(x)) (Sub-LN)."""

    def __init__(
        self,
        d_model,
        d_ff,
        gains,
        *,
        init_fn,
        activation="relu",
        make_norm=None,
        inner_norm=False,
        dtype=jnp.float32,
        param_dtype=jnp.float32,
        rngs,
    ):
        lin = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.fc1 = _linear(d_model, d_ff, init_fn(gains["fc1"]), **lin)
        self.fc2 = _linear(d_ff, d_model, init_fn(gains["fc2"]), **lin)
        self.activation = activation
        self.inner_norm = make_norm(d_ff) if inner_norm else None

    def __call__(self, x, *, dropout_rate=0.0, key=None):
        act = jax.nn.relu if self.activation == "relu" else jax.nn.gelu
        h = dropout(act(self.fc1(x)), dropout_rate, key)
        return self.fc2(h if self.inner_norm is None else self.inner_norm(h))


class NGPTMLP(nnx.Module):
    """nGPT's gated MLP, NVIDIA/ngpt `model.py` lines 77-79, 98-100 and 158-164, without biases.

    uv = s_uv * sqrt(d_model) * W_uv x (s_uv per channel, init 1), u, v = split(uv), out = W_2 (u * SiLU(v)).
    `fc1` maps d_model -> 2 d_ff, `fc2` d_ff -> d_model.
    """

    def __init__(self, d_model, d_ff, gains, *, init_fn, dtype=jnp.float32, param_dtype=jnp.float32, rngs):
        lin = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs, use_bias=False)
        self.fc1 = _linear(d_model, 2 * d_ff, init_fn(gains["fc1"]), **lin)
        self.fc2 = _linear(d_ff, d_model, init_fn(gains["fc2"]), **lin)
        self.suv = nnx.Param(jnp.ones((2 * d_ff,), param_dtype))  # suv_init_value = suv_init_scaling = 1
        self.sqrt_d = d_model**0.5

    def __call__(self, x, *, dropout_rate=0.0, key=None):
        uv = self.fc1(x) * (self.suv[...] * self.sqrt_d).astype(x.dtype)
        u, v = jnp.split(uv, 2, axis=-1)
        return self.fc2(dropout(u * jax.nn.silu(v), dropout_rate, key))
