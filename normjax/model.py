"""The Transformer: embeddings, stacks of blocks (Python loop or nnx.scan), final norms, output head."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from normjax import init, registry
from normjax.blocks import Block, BlockContext, norm_factory
from normjax.config import ModelConfig
from normjax.hyper import HyperStreams
from normjax.layers import attention_bias, dropout, softcap
from normjax.placements import DualStream
from normjax.skips import initial_state as skip_state


def sinusoidal_positions(max_len: int, d: int) -> np.ndarray:
    """Vaswani's fixed sin/cos position table (max_len, d)."""
    pos = np.arange(max_len)[:, None]
    inv_freq = np.exp(-math.log(10000.0) * np.arange(0, d, 2) / d)
    table = np.zeros((max_len, d))
    table[:, 0::2] = np.sin(pos * inv_freq)
    table[:, 1::2] = np.cos(pos * inv_freq)[:, : d // 2]
    return table


def embedding_scale(cfg: ModelConfig, stack: str) -> float:
    """Multiplier on `stack`'s embedding table init: the first one a layer's init rule sets (T-Fixup), else 1."""
    for placement in cfg.layer_placements(stack):
        rule = registry.get(placement).init
        scale = rule(cfg, stack).embedding_scale if rule else 1.0
        if scale != 1.0:
            return scale
    return 1.0


def check_token_ids(tokens, vocab_size: int, name: str = "tokens"):
    """ValueError naming the first id outside [0, vocab_size) of concrete `tokens`; traced values pass.

    Under `jax.jit` ids are not checked (an id of -1 reads the last row, ids >= vocab_size give NaN): check
    the batch before the jitted call, or wrap the call with `jax.experimental.checkify` (docs/model_api.md).
    """
    if isinstance(tokens, jax.core.Tracer):
        return
    ids = np.asarray(tokens)
    if not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"{name} must be integer token ids, got dtype {ids.dtype}")
    bad = (ids < 0) | (ids >= vocab_size)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            f"{name} holds token id {int(ids[where])} at index {where}: ids must be in [0, {vocab_size}) "
            f"(vocab_size={vocab_size})"
        )


def check_array(value, name: str) -> None:
    """TypeError naming `name` when `value` is not an array (a list or tuple fails deep inside flax)."""
    if not (hasattr(value, "shape") and hasattr(value, "dtype")):
        raise TypeError(f"{name} must be a jax or numpy array, got a {type(value).__name__}: pass jnp.asarray({name})")


def checked_mask(mask, shape: tuple, name: str):
    """`mask` (None: no padding) as a bool array of `shape`, True (or nonzero) for real tokens.

    Raises:
      TypeError: naming `name` when it is not an array, or not of bool or integer dtype.
      ValueError: naming `name` when its shape is not `shape` (its tokens' (batch, length)).
    """
    if mask is None:
        return None
    check_array(mask, name)
    if tuple(mask.shape) != tuple(shape):
        raise ValueError(f"{name} must have its tokens' shape (batch, length) = {tuple(shape)}; got {mask.shape}")
    if not (jnp.issubdtype(mask.dtype, jnp.bool_) or jnp.issubdtype(mask.dtype, jnp.integer)):
        raise TypeError(f"{name} must be bool (True for real tokens) or integer 0/1, got dtype {mask.dtype}")
    return mask if mask.dtype == jnp.bool_ else mask != 0


class Embedder(nnx.Module):
    """tokens -> sqrt(d) * E[tokens] + positions, E ~ N(0, 1/d) (times T-Fixup's factor where it applies).

    With an embedding norm (`cfg.embedding_norm` or a placement such as peri_ln) the sum is normalised before
    dropout, as torchscale's `layernorm_embedding` and x-transformers' `post_emb_norm`.
    """

    def __init__(self, cfg: ModelConfig, stack: str, *, rngs: nnx.Rngs):
        d, pdt = cfg.d_model, jnp.dtype(cfg.param_dtype)
        self.vocab_size = cfg.vocab_size
        std = d**-0.5 * embedding_scale(cfg, stack)
        self.table = nnx.Embed(
            cfg.vocab_size,
            d,
            embedding_init=nnx.initializers.normal(std),
            param_dtype=pdt,
            dtype=jnp.dtype(cfg.dtype),
            rngs=rngs,
        )
        self.scale = math.sqrt(d)
        self.dropout_rate = cfg.dropout
        if cfg.pos_encoding == "learned":
            self.positions = nnx.Param(nnx.initializers.normal(0.02)(rngs.params(), (cfg.max_len, d), pdt))
        else:
            self.positions = nnx.Variable(jnp.asarray(sinusoidal_positions(cfg.max_len, d), pdt))
        self.norm = norm_factory(cfg)(d) if cfg.has_embedding_norm(stack) else None

    def __call__(self, tokens_BT, key=None):
        check_array(tokens_BT, "tokens")
        shape, max_len = jnp.shape(tokens_BT), self.positions.shape[0]
        if len(shape) != 2 or 0 in shape or shape[1] > max_len:  # static shapes: checked under jit too
            raise ValueError(
                f"tokens must be (batch, length) with batch, length >= 1 and length <= max_len={max_len}; "
                f"got shape {shape}"
            )
        check_token_ids(tokens_BT, self.vocab_size)
        T = shape[1]
        x = self.table(tokens_BT) * self.scale
        x = x + self.positions[:T].astype(x.dtype)
        if self.norm is not None:
            x = self.norm(x)
        return dropout(x, self.dropout_rate, key)


def _make_layers(cfg: ModelConfig, stack: str, rngs: nnx.Rngs):
    entries = [registry.get(p) for p in cfg.layer_placements(stack)]  # the placement resolved once per layer
    if not cfg.scan_layers:
        return nnx.List([Block(cfg, stack, e, rngs=rngs, layer=l) for l, e in enumerate(entries)])

    @nnx.split_rngs(splits=len(entries))
    @nnx.vmap(in_axes=(0, 0), out_axes=0)
    def make(rngs, layer):
        return Block(cfg, stack, entries[0], rngs=rngs, layer=layer)

    return make(rngs, jnp.arange(len(entries)))


class Stack(nnx.Module):
    """A stack of blocks and its optional final norm; returns every stream it passes through."""

    def __init__(self, cfg: ModelConfig, stack: str, *, rngs: nnx.Rngs):
        self.name, self.depth = stack, cfg.stack_depth(stack)
        self.scanned, self.remat = cfg.scan_layers, cfg.remat
        self.causal = stack == "decoder"
        self.dual = cfg.has_dual_stream(stack)  # ResiDual: blocks map DualStream(x, d)
        # hyper-connections: blocks map HyperStreams of n streams (0: no hyper-connections)
        self.hyper_streams = cfg.num_streams(stack) if cfg.stream_kind(stack) == "hyper" else 0
        # the speedrun's value residual / x0 lambdas: blocks map a SkipStream (x, x0, v1)
        self.skips, self.x0_lambdas, self.value_residual = cfg.has_skips, cfg.x0_lambdas, cfg.value_residual
        self.layers = _make_layers(cfg, stack, rngs)
        self.final_norm = norm_factory(cfg, "final")(cfg.d_model) if cfg.has_final_norm(stack) else None
        # SiameseNorm: N_a, N_b on the two streams before the final norm reads their sum
        two = registry.get(cfg.layer_placements(stack)[0]).stream_norms
        self.stream_norms = nnx.List([norm_factory(cfg, "final")(cfg.d_model) for _ in "ab"]) if two else None

    def block(self, l: int) -> Block:
        """Block l as a module (a copy of the l-th slice when the layers are scanned)."""
        if not 0 <= l < self.depth:
            raise IndexError(f"block {l} out of range for the {self.depth}-block {self.name} stack")
        if not self.scanned:
            return self.layers[l]
        graphdef, state = nnx.split(self.layers)
        return nnx.merge(graphdef, jax.tree.map(lambda a: a[l], state), copy=True)

    def run_blocks(self, x, ctx: BlockContext, key=None, start: int = 0, stop: int | None = None, record: bool = False):
        """(x_stop, records): blocks start..stop-1; records[l] is {site: array} when `record` (with the
        attention logit maxima, `normjax.blocks.LOGIT_SUFFIX`)."""
        stop = self.depth if stop is None else stop
        layer_keys = None if key is None else jax.random.split(key, self.depth)

        def call(block, x, k):
            y, recs = block(x, ctx, k, logit_stats=record)
            return y, ({"stream": x} | recs if record else {})

        layers = self.layers
        if self.remat or self.scanned:
            # nnx.remat and nnx.scan refuse a Variable made in an outer trace, such as a constant (LNS's lns_scale,
            # the value residual's `first`) merged from a State that jax.grad closes over; the blocks never write
            # their state in a forward pass, so the transforms get a copy of the layers made in this trace
            layers = nnx.merge(*nnx.split(self.layers), copy=True)
        if self.remat:
            call = nnx.remat(call)
        if not self.scanned:
            records = []
            for l in range(start, stop):
                x, rec = call(layers[l], x, None if key is None else layer_keys[l])
                records.append(rec)
            return x, records
        if (start, stop) != (0, self.depth):  # a slice of a scanned stack: per-block copies
            records = []
            for l in range(start, stop):
                x, rec = call(self.block(l), x, None if key is None else layer_keys[l])
                records.append(rec)
            return x, records

        @nnx.scan(in_axes=(nnx.Carry, 0, 0), out_axes=(nnx.Carry, 0))
        def body(x, block, k):
            return call(block, x, None if key is None else k)

        keys = layer_keys if key is not None else jnp.zeros((self.depth,))
        x, stacked = body(x, layers, keys)
        return x, [jax.tree.map(lambda a, l=l: a[l], stacked) for l in range(self.depth)]

    def initial_state(self, x):
        """What block 0 maps, from x_0: x_0; DualStream(x_0, x_0) for ResiDual (`resi_dual/resi_dual.py` lines 107
        and 252); n copies of x_0 for hyper-connections (lucidrains `hyper_connections.py` line 59);
        SkipStream(x_0, x_0, 0) with the speedrun's skips (`normjax.skips.initial_state`)."""
        if self.skips:
            return skip_state(x, x0_lambdas=self.x0_lambdas, value_residual=self.value_residual)
        if self.dual:
            return DualStream(x, x)
        return HyperStreams((x,) * self.hyper_streams) if self.hyper_streams else x

    def final_norm_input(self, last):
        """What the final norm reads from the last state: x_L; d_L for ResiDual; N_a(x_L) + N_b(d_L) for SiameseNorm
        (Qwen-Applications/SiameseNorm `deit-model-siamesenorm.py` line 355); the sum of the streams for
        hyper-connections (lucidrains `hyper_connections.py` line 61, `reduce_stream` by sum); x_L of a SkipStream."""
        if self.skips:
            return last.x
        if self.stream_norms is not None:
            return self.stream_norms[0](last.x) + self.stream_norms[1](last.d)
        if self.dual:
            return last.d
        return last.total() if self.hyper_streams else last

    def output(self, last):
        """The stack output from its last state: N(x_L) (x_L without a final norm); x_L + N(d_L) for ResiDual
        (microsoft/ResiDual `resi_dual/resi_dual.py` lines 131 and 283, `x * alpha + layer_norm(res)`, alpha = 1);
        N(sum of the streams) for hyper-connections; N(N_a(x_L) + N_b(d_L)) for SiameseNorm."""
        z = self.final_norm_input(last)
        z = z if self.final_norm is None else self.final_norm(z)
        return last.x + z if self.dual and self.stream_norms is None else z

    def __call__(self, x, ctx: BlockContext, key=None, record: bool = False):
        """(output, records, last state): x_L (a DualStream (x_L, d_L) for ResiDual, the HyperStreams for
        hyper-connections) and the output from it; the stack starts from `initial_state(x)`."""
        last, records = self.run_blocks(self.initial_state(x), ctx, key, record=record)
        return self.output(last), records, last


class Transformer(nnx.Module):
    """Decoder-only LM, bidirectional encoder, or encoder-decoder, as `cfg.arch` says.

    Call it as `model(tokens, padding_mask=...)` (decoder / encoder) or `model(src, tgt, src_mask=...,
    tgt_mask=...)` (encoder_decoder); masks are True for real tokens. `dropout_rng=None` is deterministic.
    """

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.cfg = cfg
        self.stacks = nnx.Dict({s: Stack(cfg, s, rngs=rngs) for s in cfg.stacks})
        self.embedders = nnx.Dict({s: Embedder(cfg, s, rngs=rngs) for s in cfg.stacks})
        # one assignment: a None set first would make `head` a static attribute that a Linear cannot replace
        self.head = (
            None
            if cfg.tie_embeddings
            else nnx.Linear(
                cfg.d_model,
                cfg.vocab_size,
                use_bias=False,
                kernel_init=nnx.initializers.variance_scaling(1.0, "fan_avg", "normal"),
                dtype=jnp.dtype(cfg.dtype),
                param_dtype=jnp.dtype(cfg.param_dtype),
                rngs=rngs,
            )
        )

        # a hypersphere placement (ngpt) names the whole model: ModelConfig refuses it in per-layer tuples
        entry = registry.get(cfg.placement) if isinstance(cfg.placement, str) else None
        hypersphere = entry is not None and any(w.hypersphere for w in entry.wirings.values())
        self._post_update = None if entry is None else entry.post_update
        scale = init.ngpt_scale(cfg.d_model)
        # nGPT's s_z (NVIDIA/ngpt model.py lines 239-241, 284-285): stored as base_scale, used as s_z / base_scale
        self.sz = nnx.Param(jnp.full((cfg.vocab_size,), scale, jnp.dtype(cfg.param_dtype))) if hypersphere else None
        self.sz_factor = init.NGPT_SZ_INIT / scale
        if self._post_update is not None:  # at init too (nGPT's unit weights)
            nnx.update(self, self.post_update(nnx.state(self, nnx.Param)))

    def post_update(self, params):
        """The placement's hook on the params after each optimizer update (nGPT: unit weights); else identity.

        `normjax.train.steps.train_step` calls it right after `optax.apply_updates`.
        """
        return params if self._post_update is None else self._post_update(params)

    # -- contexts -----------------------------------------------------------------------------------
    def context(
        self,
        stack: str,
        tokens_BT: jax.Array,
        mask_BT: jax.Array | None = None,
        memory_BSD: jax.Array | None = None,
        memory_mask_BS: jax.Array | None = None,
    ) -> BlockContext:
        """The BlockContext of `stack` for these tokens, masks and (seq2seq decoder) encoder memory."""
        dt = jnp.dtype(self.cfg.dtype)
        T = tokens_BT.shape[1]
        causal = self.stacks[stack].causal
        ctx = BlockContext(self_bias=attention_bias(mask_BT, T, T, causal=causal, dtype=dt))
        if self.cfg.has_cross_attention(stack):
            if memory_BSD is None:
                raise ValueError("the encoder_decoder decoder needs the encoder memory")
            S = memory_BSD.shape[1]
            cross = attention_bias(memory_mask_BS, T, S, causal=False, dtype=dt)
            ctx = ctx.replace(memory=memory_BSD, cross_bias=cross)
        return ctx

    def _run(self, stack, tokens_BT, mask_BT, key, record, memory=None, memory_mask=None):
        keys = (None, None) if key is None else tuple(jax.random.split(key))
        x = self.embedders[stack](tokens_BT, keys[0])
        names = {"encoder": "src_mask", "decoder": "tgt_mask"} if self.cfg.arch == "encoder_decoder" else {}
        mask_BT = checked_mask(mask_BT, tokens_BT.shape, names.get(stack, "padding_mask"))
        if memory is not None:
            memory_mask = checked_mask(memory_mask, memory.shape[:2], "src_mask")
        ctx = self.context(stack, tokens_BT, mask_BT, memory, memory_mask)
        return self.stacks[stack](x, ctx, keys[1], record=record)

    def logits(self, x_BTD: jax.Array) -> jax.Array:
        if self.head is not None:
            out = self.head(x_BTD)
        else:
            out = x_BTD @ self.embedders[self.cfg.stacks[-1]].table.embedding[...].T.astype(x_BTD.dtype)
        out = out if self.sz is None else out * (self.sz[...] * self.sz_factor).astype(out.dtype)
        cap = self.cfg.final_logit_softcap  # Gemma 2, google/gemma_pytorch gemma/model.py lines 53-56
        return out if cap is None else softcap(out, cap)

    # -- forward ------------------------------------------------------------------------------------
    def forward(
        self,
        *inputs: jax.Array,
        padding_mask: jax.Array | None = None,
        src_mask: jax.Array | None = None,
        tgt_mask: jax.Array | None = None,
        dropout_rng: jax.Array | None = None,
        record: bool = False,
    ) -> tuple[jax.Array, dict]:
        """(logits, traces): traces[stack] = (records per block, last stream) when `record`."""
        cfg = self.cfg
        if cfg.arch == "encoder_decoder":
            if len(inputs) != 2 or padding_mask is not None:
                raise TypeError("encoder_decoder is called as model(src, tgt, src_mask=, tgt_mask=)")
            src, tgt = inputs
            ekey, dkey = (None, None) if dropout_rng is None else tuple(jax.random.split(dropout_rng))
            memory, erec, efinal = self._run("encoder", src, src_mask, ekey, record)
            out, drec, dfinal = self._run("decoder", tgt, tgt_mask, dkey, record, memory, src_mask)
            traces = {"encoder": (erec, efinal), "decoder": (drec, dfinal)}
        else:
            if len(inputs) != 1 or src_mask is not None or tgt_mask is not None:
                raise TypeError(f"{cfg.arch} is called as model(tokens, padding_mask=)")
            stack = cfg.stacks[0]
            out, rec, final = self._run(stack, inputs[0], padding_mask, dropout_rng, record)
            traces = {stack: (rec, final)}
        return self.logits(out), traces

    def __call__(self, *inputs, padding_mask=None, src_mask=None, tgt_mask=None, dropout_rng=None):
        return self.forward(
            *inputs, padding_mask=padding_mask, src_mask=src_mask, tgt_mask=tgt_mask, dropout_rng=dropout_rng
        )[0]

    def encode(
        self, src_BS: jax.Array, src_mask: jax.Array | None = None, dropout_rng: jax.Array | None = None
    ) -> jax.Array:
        """Encoder memory (B, S, D) of an encoder_decoder model."""
        return self._run("encoder", src_BS, src_mask, dropout_rng, False)[0]

    def decode(
        self,
        tgt_BT: jax.Array,
        memory_BSD: jax.Array,
        src_mask: jax.Array | None = None,
        tgt_mask: jax.Array | None = None,
        dropout_rng: jax.Array | None = None,
    ) -> jax.Array:
        """Decoder logits (B, T, V) given the encoder memory."""
        out = self._run("decoder", tgt_BT, tgt_mask, dropout_rng, False, memory_BSD, src_mask)[0]
        return self.logits(out)
