"""Pre-LN attention + MLP blocks written in equinox, dm-haiku, Flax Linen and penzai, each as f(params, x) on (T, D)."""

import dataclasses
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import pytest

T, D, H, F = 4, 8, 2, 16  # tokens, width, heads, MLP width: J is (T D) x (T D) = 32 x 32


@dataclasses.dataclass(frozen=True, eq=False)
class Framework:
    """apply(params, x_TD) -> y_TD; init(seed) -> params in float64; jit: the framework's own jit."""

    name: str
    apply: Callable
    init: Callable
    jit: Callable = jax.jit

    @functools.cached_property
    def jacfwd(self) -> Callable:
        """(params, x) -> d apply / d x by jax.jacfwd, under the framework's jit (compiled once per dtype)."""
        return self.jit(jax.jacfwd(self.apply, argnums=1))


def cast(params, dtype):
    """Every floating array leaf of params in `dtype`, also inside penzai Parameters (mutable holders of arrays,
    leaves of the pytree: a cast copy); other leaves (functions, ints) kept."""

    def leaf(a):
        if isinstance(a, jax.Array) and jnp.issubdtype(a.dtype, jnp.floating):
            return a.astype(dtype)
        if hasattr(a, "__get_state_as_jax_pytree__"):  # a penzai Variable: freeze, cast, a new Parameter
            return cast(a.freeze(), dtype).unfreeze_as_copy()
        return a

    return jax.tree.map(leaf, params)


@functools.cache  # one Framework per session: its jitted references compile once
def equinox() -> Framework:
    eqx = pytest.importorskip("equinox", reason="equinox is not installed (requirements-dev.txt)")

    class Block(eqx.Module):
        ln1: eqx.nn.LayerNorm
        attn: eqx.nn.MultiheadAttention
        ln2: eqx.nn.LayerNorm
        mlp: eqx.nn.MLP  # holds its activation function: a non-array leaf

        def __init__(self, key):
            k1, k2 = jax.random.split(key)
            self.ln1, self.ln2 = eqx.nn.LayerNorm(D), eqx.nn.LayerNorm(D)
            self.attn = eqx.nn.MultiheadAttention(H, D, key=k1)
            self.mlp = eqx.nn.MLP(D, D, F, depth=1, activation=jax.nn.gelu, key=k2)

        def __call__(self, x_TD):
            h_TD = jax.vmap(self.ln1)(x_TD)
            x_TD = x_TD + self.attn(h_TD, h_TD, h_TD)
            return x_TD + jax.vmap(self.mlp)(jax.vmap(self.ln2)(x_TD))

    return Framework(
        "equinox", lambda m, x: m(x), lambda seed: cast(Block(jax.random.key(seed)), jnp.float64), eqx.filter_jit
    )


@functools.cache  # one Framework per session: its jitted references compile once
def haiku() -> Framework:
    hk = pytest.importorskip("haiku", reason="dm-haiku is not installed (requirements-dev.txt)")

    def block(x_TD):
        h_TD = hk.LayerNorm(-1, create_scale=True, create_offset=True)(x_TD)
        attn = hk.MultiHeadAttention(H, D // H, w_init=hk.initializers.VarianceScaling(1.0), model_size=D)
        x_TD = x_TD + attn(h_TD, h_TD, h_TD)
        h_TD = hk.LayerNorm(-1, create_scale=True, create_offset=True)(x_TD)
        return x_TD + hk.Linear(D)(jax.nn.gelu(hk.Linear(F)(h_TD)))

    t = hk.without_apply_rng(hk.transform(block))
    return Framework("haiku", t.apply, lambda seed: cast(t.init(jax.random.key(seed), jnp.ones((T, D))), jnp.float64))


@functools.cache  # one Framework per session: its jitted references compile once
def linen() -> Framework:
    from flax import linen as nn

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x_TD):
            h_TD = nn.LayerNorm()(x_TD)
            x_TD = x_TD + nn.MultiHeadDotProductAttention(num_heads=H)(h_TD, h_TD)
            h_TD = nn.LayerNorm()(x_TD)
            return x_TD + nn.Dense(D)(jax.nn.gelu(nn.Dense(F)(h_TD)))

    block = Block()
    return Framework(
        "linen", block.apply, lambda seed: cast(block.init(jax.random.key(seed), jnp.ones((T, D))), jnp.float64)
    )


@functools.cache  # one Framework per session: its jitted references compile once
def penzai() -> Framework:
    """A Gemma-2-like decoder block from penzai's own builder and layers: RMSNorm before and after attention and
    MLP, multi-query attention with a sliding causal window (3 of the 4 tokens), RoPE, logit soft-capping and a
    GeGLU MLP. Its weights are `pz.Parameter` objects: non-array leaves of the pytree passed as params; its jit is
    `pz.variable_jit` (jax.jit refuses Parameter arguments)."""
    pytest.importorskip("penzai", reason="penzai is not installed (requirements-dev.txt)")
    from penzai import pz
    from penzai.models.transformer.variants import llamalike_common as gemma

    config = gemma.LlamalikeTransformerConfig(
        num_kv_heads=1,
        query_head_multiplier=H,
        embedding_dim=D,
        projection_dim=D // H,
        mlp_hidden_dim=F,
        num_decoder_blocks=1,
        vocab_size=16,
        mlp_variant="geglu_approx",
        tie_embedder_and_logits=True,
        attention_type=gemma.AttentionTypeSlidingWindowCausal(window_size=3),
        use_post_attn_norm=True,
        use_post_ffw_norm=True,
        attn_logits_soft_cap=50.0,
        parameter_dtype=jnp.float64,
        activation_dtype=jnp.float64,
    )

    def apply(block, x_TD):
        x = pz.nx.wrap(x_TD).tag("seq", "embedding")
        return block(x, token_positions=pz.nx.arange("seq", T)).unwrap("seq", "embedding")

    build = lambda seed: gemma.build_llamalike_block("block", jax.random.key(seed), config)
    # Each build holds a new functools.partial (its GeGLU's gelu), a static field compared by identity, so two
    # builds are two pytree structures to jax.jit (normjax keys on the traced program and compiles once either
    # way). One structure with each seed's Parameters, as a training loop has, keeps the references compiled once.
    structure = jax.tree.structure(build(0))
    return Framework("penzai", apply, lambda seed: structure.unflatten(jax.tree.leaves(build(seed))), pz.variable_jit)


FRAMEWORKS = {"equinox": equinox, "haiku": haiku, "linen": linen}  # penzai: tests/interop/test_penzai.py


def inputs(seed: int = 1, dtype=jnp.float64):
    return jax.random.normal(jax.random.key(seed), (T, D), jnp.float64).astype(dtype)
