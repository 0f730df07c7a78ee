"""One Transformer block: attention (+ cross attention) and MLP sublayers, each wired by the block's placement."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import nnx, struct

from normjax.config import ModelConfig
from normjax.cotangent import materialize_cotangent
from normjax.hyper import HyperConnection
from normjax.init import NGPT_ALPHA_INIT, InitRule, block_init, kernel_init, ngpt_scale
from normjax.layers import MLP, NGPTMLP, Attention, dropout
from normjax.norms import make_norm
from normjax.registry import Placement
from normjax.skips import VALUE_LAMBDA_INIT, X0_LAMBDAS_INIT, SkipStream, mix_value, mix_x0


@struct.dataclass
class BlockContext:
    """What a block needs besides its input: attention biases and, in a seq2seq decoder, the memory."""

    self_bias: jax.Array | None = None  # (B, 1, T, T) additive mask, None = attend everywhere
    memory: jax.Array | None = None  # (B, S, D) encoder output
    cross_bias: jax.Array | None = None  # (B, 1, T, S)


def norm_factory(cfg: ModelConfig, site: str | None = None):
    """make_norm with the config's kind, eps, bias, gain, dtype and the DyT / Derf alpha_0 of `site` ("attn", "ffn",
    "final" or None, `ModelConfig.norm_alpha`) bound: call it with the width d."""
    return functools.partial(
        make_norm,
        cfg.norm,
        eps=cfg.norm_eps,
        dyt_alpha=cfg.norm_alpha(site),
        use_bias=cfg.norm_bias,
        gain=cfg.norm_gain,
        param_dtype=jnp.dtype(cfg.param_dtype),
    )


class Sublayer(nnx.Module):
    """A branch F (attention or MLP) and the norms, constants and gate its placement wires around it."""

    def __init__(
        self,
        cfg: ModelConfig,
        name: str,
        wiring,
        branch: nnx.Module,
        init,
        *,
        shared_gate: bool,
        layer=0,
        index=0,
        num_streams: int = 1,
    ):
        """`wiring` is the placement's Wiring of this sublayer; `layer` the block's index in its stack and `index`
        the sublayer's (both traced when the stack is built by nnx.vmap); `num_streams` n for hyper-connections."""
        self.name, self.wire, self.block_skip = name, wiring.fn, wiring.block_skip
        self.branch = branch
        d, pdt = cfg.d_model, jnp.dtype(cfg.param_dtype)
        make = norm_factory(cfg, "ffn" if name == "ffn" else "attn")
        # LNS: 1/sqrt(l), l = layer + 1, a fixed variable (`layer` is traced when the stack is built by nnx.vmap)
        scale_dtype = jnp.promote_types(pdt, jnp.float32)
        depth_scale = jnp.asarray(layer + 1, scale_dtype) ** -0.5 if wiring.depth_scaled else None
        self.lns_scale = None if depth_scale is None else nnx.Variable(depth_scale)
        self.norm = make(d) if wiring.norms >= 1 else None
        self.norm2 = make(d) if wiring.norms >= 2 else None
        self.norm3 = make(d) if wiring.norms >= 3 else None
        self.alpha = init.deepnorm_alpha
        self.omega = nnx.Param(jnp.full((d,), init.admin_omega, pdt)) if wiring.omega else None
        gate_shape = {"scalar": None if shared_gate else (), "channel": (d,)}.get(wiring.gate)
        self.gate = None if gate_shape is None else nnx.Param(jnp.full(gate_shape, init.gate_init, pdt))
        # nGPT: the gate stores alpha_scale (init.gate_init) and acts as gate * alpha_init / alpha_scale
        self.eigen_factor = NGPT_ALPHA_INIT / init.gate_init if wiring.hypersphere else None
        self.hyper = (  # one assignment: a None set first would make `hyper` a static attribute
            HyperConnection(
                wiring.hyper,
                num_streams,
                d,
                index,
                make_norm=make,
                eps=cfg.norm_eps,
                sinkhorn_iters=cfg.num_sinkhorn_iters,
                sinkhorn_order=cfg.sinkhorn_step_order,
                param_dtype=pdt,
            )
            if wiring.hyper
            else None
        )

    def __call__(self, x, F, records, shared_gate=None, block_input=None):
        def rec(role, z):
            records[f"{self.name}.{role}"] = z
            return z

        gate = shared_gate if self.gate is None else self.gate[...]
        gate = None if gate is None else gate.astype(x.dtype)
        if not self.block_skip:
            return self.wire(self, x, F, rec, gate)
        if block_input is None:
            raise TypeError(
                f"the {self.name} sublayer of a B2T block also adds the block's input: probe the whole block "
                "(block_fn), or pass block_input to Block.apply_sublayer"
            )
        return self.wire(self, x, F, rec, gate, block_input)


class Block(nnx.Module):
    """Self attention, cross attention (seq2seq decoder only) and MLP, each a wired Sublayer."""

    def __init__(self, cfg: ModelConfig, stack: str, entry: Placement, *, rngs: nnx.Rngs, layer=0):
        """`entry` is the block's placement (its registry entry, resolved once per layer by the stack)."""
        if not isinstance(entry, Placement):
            raise TypeError(f"Block takes its registry entry (normjax.registry.get(name)), got {entry!r}")
        init = block_init(cfg, stack, entry.init(cfg, stack) if entry.init else InitRule())
        init_fn = functools.partial(kernel_init, cfg)
        shared = entry.shared_gate and not cfg.rezero_per_sublayer
        dt, pdt = jnp.dtype(cfg.dtype), jnp.dtype(cfg.param_dtype)
        self.placement, self.dropout_rate = entry.name, cfg.dropout
        self.branch_multiplier = cfg.branch_multiplier(stack)  # CompleteP / depth-muP (L / L_base)^-alpha
        self.gate = nnx.Param(jnp.zeros((), pdt)) if shared else None
        # the speedrun's x0 lambdas (a_l, c_l) and value-residual lam_l; `first` marks block 0 (traced under vmap)
        self.x0_lambdas = nnx.Param(jnp.asarray(X0_LAMBDAS_INIT, pdt)) if cfg.x0_lambdas else None
        self.value_lambda = nnx.Param(jnp.full((), VALUE_LAMBDA_INIT, pdt)) if cfg.value_residual else None
        self.first = nnx.Variable(jnp.asarray(layer == 0)) if cfg.value_residual else None
        per_block = cfg.sublayers_per_block(stack)
        names = ("attn", "cross", "ffn") if cfg.has_cross_attention(stack) else ("attn", "ffn")

        def sublayer(name, branch):
            return Sublayer(
                cfg,
                name,
                entry.wiring(name),
                branch,
                init,
                shared_gate=shared,
                layer=layer,
                index=layer * per_block + names.index(name),
                num_streams=cfg.num_streams(stack),
            )

        def attention(name):
            wiring = entry.wiring(name)
            qk = ("q", "k") if cfg.qk_norm and cfg.qk_norm_scope == "head" else ()
            branch = Attention(
                cfg.d_model,
                cfg.num_heads,
                init.of(name),
                init_fn=init_fn,
                make_norm=norm_factory(cfg),
                qkv_norm=tuple(r for r in ("q", "k", "v") if r in wiring.qkv_norm or r in qk),
                qk_full_norm=("q", "k") if cfg.qk_norm and cfg.qk_norm_scope == "full" else (),
                clip=cfg.qkv_clip,
                logit_softcap=cfg.attn_logit_softcap,
                out_gate=cfg.attn_gate,
                inner_norm=wiring.inner_norm,
                head_scale=wiring.head_scale,
                ngpt_scale=ngpt_scale(cfg.d_model) if wiring.hypersphere else None,
                dtype=dt,
                param_dtype=pdt,
                rngs=rngs,
            )
            return sublayer(name, branch)

        self.attn = attention("attn")
        self.cross = attention("cross") if cfg.has_cross_attention(stack) else None
        if entry.wiring("ffn").hypersphere:
            mlp = NGPTMLP(cfg.d_model, cfg.d_ff, init.of("ffn"), init_fn=init_fn, dtype=dt, param_dtype=pdt, rngs=rngs)
        else:
            mlp = self._mlp(cfg, init, init_fn, entry, dt, pdt, rngs)
        self.ffn = sublayer("ffn", mlp)

    @staticmethod
    def _mlp(cfg, init, init_fn, entry, dt, pdt, rngs):
        return MLP(
            cfg.d_model,
            cfg.d_ff,
            init.of("ffn"),
            init_fn=init_fn,
            activation=cfg.activation,
            make_norm=norm_factory(cfg),
            inner_norm=entry.wiring("ffn").inner_norm,
            dtype=dt,
            param_dtype=pdt,
            rngs=rngs,
        )

    def sublayers(self) -> tuple[Sublayer, ...]:
        return tuple(s for s in (self.attn, self.cross, self.ffn) if s is not None)

    def branch(
        self, sublayer: Sublayer, ctx: BlockContext, records, key=None, logit_stats: bool = False, value_mix=None
    ):
        """The branch function F(h) of `sublayer`, residual dropout included; with `logit_stats` an attention
        sublayer also records "<name>.logit_max" (B, T) and "<name>.heads", see `LOGIT_SUFFIX` and `HEAD_SUFFIX`;
        `value_mix` goes to self attention (`Attention`'s value hook)."""
        rate = self.dropout_rate
        keys = (None, None) if key is None else tuple(jax.random.split(key))
        rec = lambda role, z: records.setdefault(f"{sublayer.name}.{role}", z)
        stat = head_stat = None
        if logit_stats and sublayer.name != "ffn":
            stat = lambda m: records.__setitem__(f"{sublayer.name}{LOGIT_SUFFIX}", m)
            head_stat = lambda d: records.__setitem__(f"{sublayer.name}{HEAD_SUFFIX}", d)

        def F(h):
            if sublayer.name == "ffn":
                out = sublayer.branch(h, dropout_rate=rate, key=keys[0])
            elif sublayer.name == "attn":
                out = sublayer.branch(
                    h,
                    h,
                    ctx.self_bias,
                    record=rec,
                    dropout_rate=rate,
                    key=keys[0],
                    logit_stat=stat,
                    value_mix=value_mix,
                    head_stat=head_stat,
                )
            else:
                out = sublayer.branch(
                    h,
                    ctx.memory,
                    ctx.cross_bias,
                    record=rec,
                    dropout_rate=rate,
                    key=keys[0],
                    logit_stat=stat,
                    head_stat=head_stat,
                )
            if self.branch_multiplier != 1.0:
                out = out * jnp.asarray(self.branch_multiplier, out.dtype)
            records[f"{sublayer.name}.out"] = out
            return dropout(out, rate, keys[1])

        return F

    def apply_sublayer(
        self, sublayer: Sublayer, x, ctx: BlockContext, records, key=None, block_input=None, logit_stats=False
    ):
        """x after one wired sublayer; fills `records` with its norm inputs and branch output (times the branch
        multiplier, when the config sets one), and with `logit_stats` its attention logit maxima.
        `block_input` is the block's input, which B2T's last sublayer adds.

        A `SkipStream` x (the speedrun's value residual / x0 lambdas) maps to a SkipStream: the self-attention
        sublayer, the block's first, reads a_l x + c_l x0 and mixes its values with v_1 (writing v_1 in block 0);
        the block input B2T adds is a_l x + c_l x0 too (the speedrun's block starts with that mix)."""
        shared_gate = None if self.gate is None else self.gate[...]
        if not isinstance(x, SkipStream):
            F = self.branch(sublayer, ctx, records, key, logit_stats)
            return sublayer(x, F, records, shared_gate, block_input)
        lambdas = None if self.x0_lambdas is None else self.x0_lambdas[...]
        first_sublayer = sublayer.name == "attn"
        out = {"v1": x.v1}

        def value_mix(v):
            mixed, out["v1"] = mix_value(v, x.v1, self.value_lambda[...], self.first[...])
            return mixed

        vmix = value_mix if first_sublayer and self.value_lambda is not None else None
        F = self.branch(sublayer, ctx, records, key, logit_stats, vmix)
        h = mix_x0(x, lambdas) if first_sublayer else x.x
        skip_in = None if block_input is None else mix_x0(block_input, lambdas)
        return x.replace(x=sublayer(h, F, records, shared_gate, skip_in), v1=out["v1"])

    def __call__(self, x, ctx: BlockContext, key=None, logit_stats: bool = False):
        """(y, records): the block output and {site: array} for every norm input and branch output; with
        `logit_stats` also "attn.logit_max" (and "cross.logit_max"), see `LOGIT_SUFFIX`."""
        records = {}
        subs = self.sublayers()
        keys = [None] * len(subs) if key is None else list(jax.random.split(key, len(subs)))
        x = x_in = materialize_cotangent(x)
        for sublayer, k in zip(subs, keys, strict=True):
            x = self.apply_sublayer(sublayer, x, ctx, records, k, block_input=x_in, logit_stats=logit_stats)
        return x, records


# Record key suffix of an attention sublayer's logit maxima ("attn.logit_max", "cross.logit_max"): (B, T), per
# query the largest pre-mask logit over heads and allowed keys (normjax.layers.masked_logit_max). Not a norm
# input: split_records keeps these keys out of the norm sites.
LOGIT_SUFFIX = ".logit_max"
# ... and of its per-head statistics ("attn.heads"): {"logit_max": (B, H, T), "first_key_mass": (B, H, T)}, see
# `normjax.layers.Attention`'s head_stat.
HEAD_SUFFIX = ".heads"


def split_records(records: dict) -> tuple[dict, dict]:
    """({norm site: input}, {sublayer: branch output}) from a block's records (logit maxima left out:
    `logit_records`)."""
    norm_inputs = {k: v for k, v in records.items() if not k.endswith((".out", LOGIT_SUFFIX, HEAD_SUFFIX))}
    branch_outputs = {k.removesuffix(".out"): v for k, v in records.items() if k.endswith(".out")}
    return norm_inputs, branch_outputs


def logit_records(records: dict) -> dict:
    """{attention sublayer ("attn", "cross"): (B, T) logit maxima} from a block's records."""
    return {k.removesuffix(LOGIT_SUFFIX): v for k, v in records.items() if k.endswith(LOGIT_SUFFIX)}


def head_records(records: dict) -> dict:
    """{attention sublayer: {"logit_max", "first_key_mass"}: (B, H, T) each} from a block's records."""
    return {k.removesuffix(HEAD_SUFFIX): v for k, v in records.items() if k.endswith(HEAD_SUFFIX)}
