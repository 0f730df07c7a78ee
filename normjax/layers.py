"""The two branches F of a block: multi-head attention (self / cross, masks, optional QKV-norm) and the MLP."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from normjax.norms import make_norm


def dropout(x, rate: float, key):
    """Inverted dropout; `key=None` or rate 0 is the identity."""
    if key is None or rate == 0.0:
        return x
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0).astype(x.dtype)


def _linear(d_in, d_out, init, *, dtype, param_dtype, rngs):
    return nnx.Linear(
        d_in, d_out, kernel_init=init, bias_init=nnx.initializers.zeros, dtype=dtype, param_dtype=param_dtype, rngs=rngs
    )


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


class Attention(nnx.Module):
    """Multi-head scaled dot-product attention with query/key/value/out projections.

    `qkv_norm=True` normalises q, k and v over the model width before attention (HybridNorm's QKV-norm);
    `record(site, z)` sees every norm input.
    """

    def __init__(
        self,
        d_model,
        num_heads,
        gains,
        *,
        init_fn,
        norm_kind=None,
        norm_kwargs=None,
        dtype=jnp.float32,
        param_dtype=jnp.float32,
        rngs,
    ):
        self.num_heads = num_heads
        lin = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.query = _linear(d_model, d_model, init_fn(gains["query"]), **lin)
        self.key = _linear(d_model, d_model, init_fn(gains["key"]), **lin)
        self.value = _linear(d_model, d_model, init_fn(gains["value"]), **lin)
        self.out = _linear(d_model, d_model, init_fn(gains["out"]), **lin)
        self.qkv_norm = (
            None
            if norm_kind is None
            else nnx.Dict({n: make_norm(norm_kind, d_model, **(norm_kwargs or {})) for n in ("q", "k", "v")})
        )

    def __call__(self, x_BTD, memory_BSD, bias_B1TS, *, record, dropout_rate=0.0, key=None):
        q, k, v = self.query(x_BTD), self.key(memory_BSD), self.value(memory_BSD)
        if self.qkv_norm is not None:
            q = self.qkv_norm["q"](record("q", q))
            k = self.qkv_norm["k"](record("k", k))
            v = self.qkv_norm["v"](record("v", v))
        B, T, D = q.shape
        H = self.num_heads
        q_BHTK = q.reshape(B, T, H, D // H).transpose(0, 2, 1, 3)
        k_BHSK = k.reshape(B, -1, H, D // H).transpose(0, 2, 1, 3)
        v_BHSK = v.reshape(B, -1, H, D // H).transpose(0, 2, 1, 3)
        logits = jnp.einsum("bhtk,bhsk->bhts", q_BHTK, k_BHSK) / jnp.sqrt(D // H).astype(q.dtype)
        if bias_B1TS is not None:
            logits = logits + bias_B1TS
        softmax_dtype = jnp.promote_types(q.dtype, jnp.float32)  # never softmax in 16 bits
        probs = jax.nn.softmax(logits.astype(softmax_dtype), axis=-1).astype(q.dtype)
        probs = dropout(probs, dropout_rate, key)
        out = jnp.einsum("bhts,bhsk->bhtk", probs, v_BHSK).transpose(0, 2, 1, 3).reshape(B, T, D)
        return self.out(out)


class MLP(nnx.Module):
    """fc2(act(fc1(x))), the position-wise feed-forward branch."""

    def __init__(
        self, d_model, d_ff, gains, *, init_fn, activation="relu", dtype=jnp.float32, param_dtype=jnp.float32, rngs
    ):
        lin = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.fc1 = _linear(d_model, d_ff, init_fn(gains["fc1"]), **lin)
        self.fc2 = _linear(d_ff, d_model, init_fn(gains["fc2"]), **lin)
        self.activation = activation

    def __call__(self, x, *, dropout_rate=0.0, key=None):
        act = jax.nn.relu if self.activation == "relu" else jax.nn.gelu
        return self.fc2(dropout(act(self.fc1(x)), dropout_rate, key))
