"""Probing hooks: residual streams and norm inputs of every block, blocks as pure functions, per-layer params.

These functions are the only way analysis and training code look inside a model (see docs/model_api.md).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import nnx, struct

from normjax.blocks import BlockContext, head_records, logit_records, split_records
from normjax.hyper import HyperStreams
from normjax.jacobian import traced
from normjax.layers import attention_bias
from normjax.model import Transformer
from normjax.placements import DualStream
from normjax.skips import SkipStream


@struct.dataclass
class StackProbes:
    """What one stack saw in a forward pass.

    streams[l] (B, T, D) enters block l; streams[L] leaves the last block. norm_inputs[l] maps every norm
    site of block l ("attn.pre", "ffn.post", ...) to its input; branch_outputs[l] maps each sublayer
    ("attn", "cross", "ffn") to its branch output F(.). final_norm_input is streams[L] when the stack has a
    final norm, else None. A pytree: a jitted function may return it.

    A ResiDual stack (`placement="resi_dual"`) carries two streams: streams[l] is its Post-LN stream x_l,
    dual_streams[l] its dual stream d_l (d_0 = x_0, d_{l+1} = d_l + the block's branch outputs), and
    final_norm_input is d_L (the stack outputs x_L + N(d_L)). dual_streams is None for every other stack.

    A hyper-connected stack (`shc`, `dhc`, `mhc`) carries n streams: hyper_streams[l] (n, B, T, D) holds them,
    streams[l] their sum (what the read-out sees; at n = 1 the Pre-LN stream), and final_norm_input the sum at L.
    hyper_streams is None for every other stack.

    With the speedrun's value residual / x0 lambdas the blocks map `normjax.skips.SkipStream` (x, x0, v1):
    streams[l] is its x (what enters block l, before the block's a_l x + c_l x0 mix).

    attn_logit_max[l] maps each attention sublayer of block l ("attn", and "cross" in a seq2seq decoder) to a
    (B, T) array: per query position, the largest attention logit (the scaled score after any soft-cap and
    before the mask bias, `normjax.layers.masked_logit_max`) over heads and over the keys the mask allows
    (causal-allowed, unpadded; -inf where none is). Padded query rows are included: reduce over real tokens.
    These are not norm inputs (a separate record channel, `normjax.blocks.LOGIT_SUFFIX`); None when the
    probe did not record them.

    attn_heads[l] maps the same sublayers to per-head statistics, {"logit_max": (B, H, T) as above per head,
    "first_key_mass": (B, H, T) the softmax weight on key 0} (`normjax.layers.Attention`'s head_stat): the
    inputs of `normjax.probes.sinks` and of the QK-Clip metric. None when not recorded.
    """

    streams: list
    norm_inputs: list
    branch_outputs: list
    final_norm_input: jax.Array | None
    dual_streams: list | None = None
    hyper_streams: list | None = None
    attn_logit_max: list | None = None
    attn_heads: list | None = None


def stack_names(model: Transformer) -> tuple[str, ...]:
    """("decoder",), ("encoder",) or ("encoder", "decoder")."""
    return model.cfg.stacks


def num_blocks(model: Transformer, stack: str) -> int:
    return model.cfg.stack_depth(stack)


def _stack_name(model: Transformer, stack: str | None) -> str:
    names = stack_names(model)
    if stack is None:
        return names[-1]
    if stack not in names:
        raise ValueError(f"stack={stack!r} is not in this {model.cfg.arch} model: valid are {names}")
    return stack


def probe(model: Transformer, *inputs, **masks) -> tuple[jax.Array, dict[str, StackProbes]]:
    """(logits, {stack: StackProbes}) from one deterministic forward pass; arguments as for model(...)."""
    logits, traces = model.forward(*inputs, **masks, record=True)
    probes = {}
    for stack, (records, final_input) in traces.items():
        probes[stack] = _stack_probes(model, stack, records, final_input)
    return logits, probes


def _stack_probes(model: Transformer, stack: str, records: list, last) -> StackProbes:
    split = [split_records({k: v for k, v in rec.items() if k != "stream"}) for rec in records]
    logit_max = [logit_records(rec) for rec in records]
    heads = [head_records(rec) for rec in records]
    has_final = model.stacks[stack].final_norm is not None
    st = model.stacks[stack]
    states = [rec["stream"] for rec in records] + [last]
    streams, dual, hyper = states, None, None
    if st.dual:
        streams, dual = [s.x for s in states], [s.d for s in states]
    elif st.hyper_streams:
        streams, hyper = [s.total() for s in states], [jnp.stack(s.streams) for s in states]
    elif st.skips:
        streams = [s.x for s in states]
    final = st.final_norm_input(last) if has_final else None
    return StackProbes(streams, [s[0] for s in split], [s[1] for s in split], final, dual, hyper, logit_max, heads)


def probe_stream(
    model: Transformer, x0_BTD, stack: str | None = None, context: BlockContext | None = None
) -> StackProbes:
    """StackProbes of `stack` fed the stream x0 (B, T, D) directly instead of embedded tokens.

    For analysis in the theory setting (e.g. Gaussian inputs with E||x||^2 = d); `context` as for
    block_fn (None: unpadded, causal for a decoder stack). A ResiDual stack starts from DualStream(x0, x0),
    a hyper-connected one from n copies of x0, as the model does (or from the DualStream / HyperStreams passed).
    """
    stack = _stack_name(model, stack)
    if not isinstance(x0_BTD, DualStream | HyperStreams | SkipStream):
        x0_BTD = model.stacks[stack].initial_state(x0_BTD)
    records = []

    def body(m, s, x, ctx):
        y, recs = m.stacks[s].run_blocks(x, ctx, record=True)
        records.extend(recs)
        return y

    final_input = _pure(model, stack, context, body, cached=False)(x0_BTD)
    return _stack_probes(model, stack, records, final_input)


def embed(model: Transformer, tokens_BT, stack: str | None = None):
    """The residual stream entering block 0 of `stack` (deterministic)."""
    return model.embedders[_stack_name(model, stack)](tokens_BT)


def block_context(
    model: Transformer, *inputs, stack: str | None = None, padding_mask=None, src_mask=None, tgt_mask=None
) -> BlockContext:
    """The BlockContext of `stack` for these inputs (masks; encoder memory for a seq2seq decoder)."""
    stack = _stack_name(model, stack)
    if model.cfg.arch != "encoder_decoder":
        return model.context(stack, inputs[0], padding_mask)
    src, tgt = inputs
    if stack == "encoder":
        return model.context("encoder", src, src_mask)
    return model.context("decoder", tgt, tgt_mask, model.encode(src, src_mask), src_mask)


def _as_batched(x):
    if jnp.ndim(jax.tree.leaves(x)[0]) == 2:
        return jax.tree.map(lambda a: a[None], x), True
    return x, False


def _check_stream_kind(model: Transformer, stack: str, x) -> None:
    """TypeError unless x is a DualStream exactly for a ResiDual stack, HyperStreams of n streams exactly for a
    hyper-connected one, and an array otherwise."""
    st = model.stacks[stack]
    if st.dual and not isinstance(x, DualStream):
        raise TypeError(
            f"the {stack} stack is ResiDual (placement resi_dual): its blocks map the pair of streams "
            f"normjax.DualStream(x, d), got {type(x).__name__}; one stream alone does not determine a ResiDual "
            "block or its Jacobian (probe with normjax.probe: StackProbes.streams and .dual_streams)"
        )
    if st.hyper_streams and not (isinstance(x, HyperStreams) and x.n == st.hyper_streams):
        got = f"HyperStreams of {x.n}" if isinstance(x, HyperStreams) else type(x).__name__
        raise TypeError(
            f"the {stack} stack is hyper-connected: its blocks map normjax.HyperStreams of {st.hyper_streams} "
            f"streams, got {got}; one stream alone does not determine its blocks or their Jacobians (probe with "
            "normjax.probe: StackProbes.hyper_streams)"
        )
    if st.skips and not isinstance(x, SkipStream):
        raise TypeError(
            f"the {stack} stack has the speedrun's value residual / x0 lambdas: its blocks map "
            f"normjax.SkipStream(x, x0, v1), got {type(x).__name__} (start from model.stacks[{stack!r}].initial_state)"
        )
    if not st.skips and isinstance(x, SkipStream):
        raise TypeError(f"the {stack} stack has no value residual or x0 lambdas: pass its own state, not a SkipStream")
    if not st.dual and not st.hyper_streams and isinstance(x, DualStream | HyperStreams):
        raise TypeError(f"the {stack} stack carries one stream: pass an array, not a {type(x).__name__}")


def _pure(model: Transformer, stack: str | None, context: BlockContext | None, body, cached: bool = True):
    """f(x) = body(model, stack name, x (B, T, D), ctx), accepting (T, D) or (B, T, D); body must not mutate.

    The model is read when f runs, never when f is made, so f always sees the current weights. Called on a
    concrete array and `cached`, f runs through `normjax.jacobian.evaluate` (compiled once per structure);
    under a transformation (jit, grad, make_jaxpr) it traces directly.
    """
    stack = _stack_name(model, stack)
    if context is None and model.cfg.has_cross_attention(stack):
        raise ValueError(
            "a seq2seq decoder block needs a context with the encoder memory: "
            "pass context=normjax.block_context(model, src, tgt, stack='decoder')"
        )
    causal = model.stacks[stack].causal

    def f(x):
        _check_stream_kind(model, stack, x)
        if cached and not any(isinstance(a, jax.core.Tracer) for a in jax.tree.leaves(x)):
            return traced.evaluate(f, x)
        x_BTD, squeeze = _as_batched(x)
        ctx = context
        if ctx is None:
            leaf = jax.tree.leaves(x_BTD)[0]
            T = leaf.shape[1]
            ctx = BlockContext(self_bias=attention_bias(None, T, T, causal=causal, dtype=leaf.dtype))
        y = body(model, stack, x_BTD, ctx)
        return jax.tree.map(lambda a: a[0], y) if squeeze else y

    return f


def _check_block(model: Transformer, stack: str | None, l) -> jax.Array:
    depth = num_blocks(model, _stack_name(model, stack))
    if isinstance(l, bool) or not isinstance(l, int) or not 0 <= l < depth:
        raise IndexError(f"block {l!r} out of range for the {depth}-block {_stack_name(model, stack)} stack")
    return jnp.asarray(l, jnp.int32)


def _block_at(st, l, static_l: int):
    """Block l of the Stack module `st`, read when traced, with a structure that does not depend on l.

    Unscanned: block `static_l` itself (its weights enter the trace as arguments, so every block of one
    structure traces to the same program). Scanned: the slice of the stacked weights, taken eagerly when they
    are concrete (the program then does not depend on l or the depth), else a dynamic slice at the traced
    int32 `l` (a static slice would put l into the program).
    """
    if not st.scanned:
        return st.layers[static_l]
    graphdef, state = nnx.split(st.layers)
    if not any(isinstance(a, jax.core.Tracer) for a in jax.tree.leaves(state)):
        # Concrete weights: slice now, so the program sees one block's weights and not the depth either.
        with jax.ensure_compile_time_eval():
            l = jnp.asarray(static_l, jnp.int32)
            state = jax.tree.map(lambda a: jax.lax.dynamic_index_in_dim(a, l, keepdims=False), state)
    else:
        state = jax.tree.map(lambda a: jax.lax.dynamic_index_in_dim(a, l, keepdims=False), state)
    return nnx.merge(graphdef, state, copy=True)


def _stacked_layers(st):
    """(graphdef, state with a leading block axis) of every block of `st`, or None when the blocks differ in
    structure (per-layer placements)."""
    if st.scanned:
        return nnx.split(st.layers)
    splits = [nnx.split(block) for block in st.layers]
    if any(g != splits[0][0] for g, _ in splits):
        return None
    return splits[0][0], jax.tree.map(lambda *a: jnp.stack(a), *[s for _, s in splits])


def block_fn(
    model: Transformer, l: int, stack: str | None = None, context: BlockContext | None = None
) -> Callable[[jax.Array], jax.Array]:
    """Block l of `stack` as a pure function x -> y of (T, D) or (B, T, D), deterministic.

    For a ResiDual stack x and y are `normjax.DualStream(x, d)` pairs, for a hyper-connected stack
    `normjax.HyperStreams` of n streams (pytrees; `normjax.jacobian` takes them: (2TD, 2TD) and (nTD, nTD)
    Jacobians), with the speedrun's skips `normjax.SkipStream(x, x0, v1)` (up to (3TD, 3TD)), and an array input
    raises TypeError.

    Reads the model's current weights on every call; every block of one structure shares one compiled
    Jacobian program (normjax.jacobian hoists the weights and l into traced arguments).
    """
    idx = _check_block(model, stack, l)
    return _pure(model, stack, context, lambda m, s, x, ctx: _block_at(m.stacks[s], idx, l)(x, ctx)[0])


def sublayer_fn(
    model: Transformer, l: int, sublayer: str, stack: str | None = None, context: BlockContext | None = None
) -> Callable[[jax.Array], jax.Array]:
    """x -> x after sublayer ("attn", "cross" or "ffn") of block l, wired as the block's placement says.

    DualStream -> DualStream for a ResiDual stack, HyperStreams -> HyperStreams for a hyper-connected one, as
    block_fn.
    """
    idx = _check_block(model, stack, l)
    names = ("attn", "cross", "ffn") if model.cfg.has_cross_attention(_stack_name(model, stack)) else ("attn", "ffn")
    if sublayer not in names:
        raise ValueError(f"sublayer={sublayer!r}: block {l} of {_stack_name(model, stack)} has {names}")

    def body(m, s, x, ctx):
        block = _block_at(m.stacks[s], idx, l)
        subs = {sub.name: sub for sub in block.sublayers()}
        return block.apply_sublayer(subs[sublayer], x, ctx, {})

    return _pure(model, stack, context, body)


def stack_fn(
    model: Transformer,
    start: int = 0,
    stop: int | None = None,
    stack: str | None = None,
    context: BlockContext | None = None,
) -> Callable[[jax.Array], jax.Array]:
    """x_start -> x_stop through blocks start..stop-1 (default stop: the last block; no final norm).

    Requires 0 <= start < stop <= depth. The blocks run in one masked loop over the whole stack (a block
    outside start..stop-1 is skipped by `lax.cond`), so every (start, stop) shares one compiled program.
    DualStream -> DualStream (ResiDual), HyperStreams -> HyperStreams (hyper-connections), as block_fn.
    """
    name = _stack_name(model, stack)
    depth = num_blocks(model, name)
    stop = depth if stop is None else stop
    for what, v in (("start", start), ("stop", stop)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"stack_fn: {what} must be an int, got {v!r}.")
    if not 0 <= start < stop <= depth:
        raise ValueError(f"stack_fn needs 0 <= start < stop <= {depth} (the {name} stack's depth), got {start}, {stop}")
    bounds = jnp.asarray([start, stop], jnp.int32)

    def body(m, s, x, ctx):
        st = m.stacks[s]

        def run(block, l, x):
            active = (l >= bounds[0]) & (l < bounds[1])
            return jax.lax.cond(active, lambda x: block(x, ctx)[0], lambda x: x, x)

        stacked = _stacked_layers(st)
        if stacked is None:  # per-layer placements: unrolled, still one program for every (start, stop)
            for l in range(st.depth):
                x = run(st.layers[l], l, x)
            return x
        graphdef, state = stacked

        def step(x, inputs):
            l, state_l = inputs
            return run(nnx.merge(graphdef, state_l, copy=True), l, x), None

        return jax.lax.scan(step, x, (jnp.arange(st.depth, dtype=jnp.int32), state))[0]

    return _pure(model, name, context, body)


def layer_params(tree: nnx.State, model: Transformer, stack: str | None = None) -> list[dict]:
    """[{name: array} per block of `stack`] from a State shaped like the model's params (or their grads)."""
    stack = _stack_name(model, stack)
    layers = tree["stacks"][stack]["layers"]
    depth = num_blocks(model, stack)
    out = [{} for _ in range(depth)]
    for path, leaf in nnx.to_flat_state(layers):
        value = leaf.get_value() if isinstance(leaf, nnx.Variable) else leaf
        if model.cfg.scan_layers:
            for l in range(depth):
                out[l][_param_name(path)] = value[l]
        else:
            out[int(path[0])][_param_name(path[1:])] = value
    return out


def _param_name(path) -> str:
    """ "ffn/fc1/kernel" for the path ("ffn", "branch", "fc1", "kernel"): the branch module is elided."""
    return "/".join(str(p) for p in path if p != "branch")


def profile_admin(model: Transformer, *inputs, **masks) -> dict[str, list[dict[str, float]]]:
    """Set every Admin omega from one deterministic forward pass (Liu et al. 2020, profiling).

    omega_i^2 = Var[x_0] + sum_{j<i} Var[f_j(x_{j-1})]: the embedding's variance plus the variances of all
    earlier branch outputs of the stack, each sublayer profiled with the omegas already set before it.
    Variances are taken over real (unpadded) tokens. Returns {stack: [{sublayer: omega} per block]}.
    """
    cfg = model.cfg
    result = {}
    src_mask = masks.get("src_mask")
    for i, stack in enumerate(stack_names(model)):
        tokens = inputs[i] if cfg.arch == "encoder_decoder" else inputs[0]
        mask = (
            masks.get("padding_mask")
            if cfg.arch != "encoder_decoder"
            else (src_mask if stack == "encoder" else masks.get("tgt_mask"))
        )
        ctx = block_context(model, *inputs, stack=stack, **masks)
        weight = jnp.ones(tokens.shape, bool) if mask is None else mask

        def variance(z, weight=weight):
            w = weight[..., None].astype(z.dtype)
            count = w.sum() * z.shape[-1]
            mean = (z * w).sum() / count
            return float((((z - mean) ** 2) * w).sum() / count)

        x = embed(model, tokens, stack)
        acc = variance(x)
        st = model.stacks[stack]
        x = st.initial_state(x)
        result[stack], per_block = [], []
        for l in range(st.depth):
            block, omegas = st.block(l), {}
            for sub in block.sublayers():
                if sub.omega is not None:
                    omegas[sub.name] = acc**0.5
                    sub.omega.set_value(jnp.full_like(sub.omega[...], acc**0.5))
                records = {}
                x = block.apply_sublayer(sub, x, ctx, records)
                acc += variance(records[f"{sub.name}.out"])
            result[stack].append(omegas)
            per_block.append(block)
        if st.scanned:
            for name in result[stack][0]:
                stacked = jnp.stack([getattr(b, name).omega[...] for b in per_block])
                getattr(st.layers, name).omega.set_value(stacked)
    return result
