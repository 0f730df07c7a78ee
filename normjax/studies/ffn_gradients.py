"""Per-layer FFN weight-gradient norms at init over many batches, compiled once per model shape.

Shared by the grad_norms_at_init and depth_scaling studies, on a synthetic copy task or on real translation
batches. The output matches `normjax.jacobian.param_probes.grad_norms` (tests check that they agree), but one
jitted function, keyed by the model's graphdef, serves every seed and every batch (param_probes.grad_norms builds
a new jitted closure per model, so each seed would compile again), the copy task's batches are drawn inside it,
and only the FFN kernels' gradients leave it.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

import normjax
from normjax.train import steps

FFN_KERNELS = ("ffn/fc1/kernel", "ffn/fc2/kernel")
_FFN = nnx.All(nnx.Param, nnx.Any(nnx.PathContains("fc1"), nnx.PathContains("fc2")), nnx.PathContains("kernel"))
BOS = 0  # token 0 starts the shifted decoder input; the task's tokens are 1 .. V-1


@dataclasses.dataclass(frozen=True)
class CopyTask:
    """A synthetic copy task at init: Zipf-distributed tokens, the target is the input sequence.

    Encoder: predict each input token. Decoder (LM): predict token t from the tokens before it.
    Encoder-decoder: the decoder reproduces the source, teacher-forced with the shifted source.
    Zipf tokens (p ~ 1/rank) give every batch a shared signal, so ||E[grad]|| is not just noise.
    """

    arch: str
    batch_size: int
    seq_len: int
    vocab_size: int


def copy_tokens(task: CopyTask, key) -> jax.Array:
    """(B, T) int32 tokens in 1 .. V-1 with p(token k) ~ 1/k."""
    logits_V = -jnp.log(jnp.arange(1, task.vocab_size, dtype=jnp.float32))
    shape = (task.batch_size, task.seq_len)
    return 1 + jax.random.categorical(key, logits_V, shape=shape).astype(jnp.int32)


@dataclasses.dataclass(frozen=True)
class PairedBatches:
    """Real translation batches at init for an encoder-decoder: `normjax.train.batching.Seq2SeqBatches`' arrays
    (src, src_mask, tgt_in, tgt_out, tgt_mask) stacked on a leading batch axis and given to `ffn_grad_norms`; the
    loss is training's masked target cross-entropy (`normjax.train.steps.forward`, no label smoothing)."""

    arch: str = "encoder_decoder"


def batch_loss(model, task: CopyTask | PairedBatches, item) -> jax.Array:
    """The loss of one batch: `item` is a PRNG key (CopyTask draws its tokens) or one batch of PairedBatches."""
    if isinstance(task, CopyTask):
        return copy_loss(model, task, copy_tokens(task, item))
    logits_BTV, targets_BT, mask_BT = steps.forward(model, "seq2seq", item)
    losses_BT = optax.softmax_cross_entropy_with_integer_labels(logits_BTV, targets_BT)
    return (losses_BT * mask_BT).sum() / mask_BT.sum()


def copy_loss(model, task: CopyTask, tokens_BT) -> jax.Array:
    """Mean token cross-entropy of the copy task (no label smoothing, no padding)."""
    shifted_BT = jnp.concatenate([jnp.full_like(tokens_BT[:, :1], BOS), tokens_BT[:, :-1]], 1)
    if task.arch == "encoder_decoder":
        logits_BTV = model(tokens_BT, shifted_BT)
    else:
        logits_BTV = model(tokens_BT if task.arch == "encoder" else shifted_BT)
    return optax.softmax_cross_entropy_with_integer_labels(logits_BTV, tokens_BT).mean()


def _per_layer_norms(model, grads) -> dict:
    """{stack: {kernel name: (L,) Frobenius norms}} of a gradient State of the FFN kernels."""
    out = {}
    for stack in normjax.stack_names(model):
        layers = normjax.layer_params(grads, model, stack)
        out[stack] = {
            name: jnp.stack([jnp.linalg.norm(jnp.ravel(layer[name])) for layer in layers]) for name in FFN_KERNELS
        }
    return out


# XLA's backend optimisation level 0 halves the compile time (8 -> 3 s for a 6-layer encoder on the
# 2-core CPU) for twice the run time of these few small batches: compiling dominates here.
@functools.partial(jax.jit, static_argnums=(0, 1), compiler_options={"xla_backend_optimization_level": 0})
def _grad_norms(graphdef, task, params, rest, items):
    model = nnx.merge(graphdef, params, rest)  # read for its config and stack depths only

    def body(total, item):
        # Differentiate every Param (nnx.scan, used by scan_layers=True, rejects Params of an outer
        # trace level); XLA drops the gradients that are never read.
        grad = jax.grad(lambda p: batch_loss(nnx.merge(graphdef, p, rest), task, item))(params)
        grad = nnx.filter_state(grad, _FFN)
        return jax.tree.map(jnp.add, total, grad), _per_layer_norms(model, grad)

    zeros = jax.tree.map(jnp.zeros_like, nnx.filter_state(params, _FFN))
    total, per_batch = jax.lax.scan(body, zeros, items)
    mean = jax.tree.map(lambda g: g / jax.tree.leaves(items)[0].shape[0], total)
    return per_batch, _per_layer_norms(model, mean)


def ffn_grad_norms(model, task: CopyTask | PairedBatches, num_batches: int, seed: int, batches=None) -> dict:
    """Per-layer gradient norms of the FFN kernels in both metrics, over `num_batches` batches: drawn from `seed`
    for a CopyTask, the leading `num_batches` of `batches` (a dict of stacked arrays) for PairedBatches.

    Returns:
      {stack: {name: {"mean_of_norms": (L,), "std_of_norms": (L,), "norm_of_mean": (L,)}}}, names
      "ffn/fc1/kernel" and "ffn/fc2/kernel": the mean over batches of ||grad_b||_F and Xiong et
      al.'s ||E_b[grad_b]||_F (equal for one batch, smaller otherwise).
    """
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    if isinstance(task, CopyTask) != (batches is None):  # never a copy task's norms for given batches, or none
        raise ValueError(f"a CopyTask draws its batches and takes none; PairedBatches needs them (task {task})")
    if isinstance(task, CopyTask):
        items = jax.random.split(jax.random.key(seed), num_batches)
    else:
        items = {k: jnp.asarray(v[:num_batches]) for k, v in batches.items()}
        if len(items["src"]) != num_batches:
            raise ValueError(f"{num_batches} batches asked for, {len(items['src'])} given")
    per_batch, norm_of_mean = jax.device_get(_grad_norms(graphdef, task, params, rest, items))
    for stack, names in per_batch.items():
        for name, norms_NL in names.items():
            if not np.all(np.isfinite(norms_NL)):
                raise FloatingPointError(f"non-finite {stack} {name} gradient norms: {norms_NL}")
    return {
        stack: {
            name: {
                "mean_of_norms": norms_NL.mean(0),
                "std_of_norms": norms_NL.std(0),
                "norm_of_mean": norm_of_mean[stack][name],
            }
            for name, norms_NL in names.items()
        }
        for stack, names in per_batch.items()
    }
