"""Pure train/eval/diagnostic steps on split NNX params; jit them at the call site."""

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx, struct

import normjax
from normjax.train import optimizers
from normjax.train.config_schema import HPARAM_FIELDS
from normjax.train.schedules import learning_rate

# Traced hyperparameters: changing them never recompiles a step (their TrainConfig fields: HPARAM_FIELDS).
HPARAMS = tuple(HPARAM_FIELDS)


@dataclasses.dataclass(frozen=True)
class StepSpec:
    """Everything static about a train step (hashable: one compile per spec and batch shape)."""

    graphdef: Any  # nnx.GraphDef of the model
    task: str  # "seq2seq" (batches src/tgt_in/tgt_out) or "lm" (tokens/targets)
    schedule: str = "inverse_sqrt"
    optimizer: optimizers.OptimizerSpec = optimizers.OptimizerSpec()

    def __post_init__(self):
        # jit hashes its static arguments on every call; hashing a GraphDef walks the whole model graph.
        object.__setattr__(self, "_hash", hash((self.graphdef, self.task, self.schedule, self.optimizer)))

    def __hash__(self):
        return self._hash


@struct.dataclass
class TrainState:
    """All that changes during training (a pytree; checkpointed as a whole)."""

    params: Any  # nnx.State of nnx.Param
    consts: Any  # the model's other variables (fixed tables), never trained
    opt_state: Any
    step: jax.Array  # updates done (int32)
    rng: jax.Array  # base key; update t uses fold_in(rng, t)
    bad_steps: jax.Array  # consecutive updates with loss above divergence_loss
    diverged_at: jax.Array  # step number of the diverging update, -1 while healthy
    hparams: dict  # name -> float32 scalar (HPARAMS)


def init_state(spec: StepSpec, model: nnx.Module, seed: int, hparams: dict) -> TrainState:
    """Splits `model` and builds the initial state; `hparams` must name every entry of HPARAMS (job.train_hparams)."""
    missing = set(HPARAMS) - set(hparams)
    if missing:
        raise ValueError(f"missing hyperparameters: {sorted(missing)}")
    _, params, consts = nnx.split(model, nnx.Param, ...)
    return TrainState(
        params=params,
        consts=consts,
        opt_state=optimizers.direction(spec.optimizer).init(params),
        step=jnp.zeros((), jnp.int32),
        rng=jax.random.key_data(jax.random.key(seed, impl="rbg")),
        bad_steps=jnp.zeros((), jnp.int32),
        diverged_at=jnp.full((), -1, jnp.int32),
        hparams={k: jnp.asarray(hparams[k], jnp.float32) for k in HPARAMS},
    )


def forward(model, task: str, batch: dict, dropout_rng=None):
    """(logits_BTV, targets_BT, mask_BT) of one batch."""
    if task == "seq2seq":
        logits_BTV = model(
            batch["src"],
            batch["tgt_in"],
            src_mask=batch["src_mask"],
            tgt_mask=batch["tgt_mask"],
            dropout_rng=dropout_rng,
        )
        return logits_BTV, batch["tgt_out"], batch["tgt_mask"]
    logits_BTV = model(batch["tokens"], padding_mask=batch["mask"], dropout_rng=dropout_rng)
    return logits_BTV, batch["targets"], batch["mask"]


def token_losses(logits_BTV, targets_BT, mask_BT, label_smoothing, z_loss=0.0):
    """Masked sums: smoothed cross entropy (plus the z-loss), nll, correct predictions, token count.

    Label smoothing mixes the one-hot target with the uniform one: q = (1 - eps) onehot + eps / V. `z_loss` adds
    z_loss * log(Z)^2 per token to "loss" (never to "nll"), Z = sum exp(logits) (PaLM; OLMo-core
    `src/olmo_core/nn/functional/cross_entropy_loss.py` lines 41-48).
    """
    # at least float32 (bf16 logits are upcast; float64 stays float64)
    logits_BTV = logits_BTV.astype(jnp.promote_types(logits_BTV.dtype, jnp.float32))
    logp_BTV = jax.nn.log_softmax(logits_BTV)
    nll_BT = -jnp.take_along_axis(logp_BTV, targets_BT[..., None], axis=-1)[..., 0]
    smooth_BT = (1.0 - label_smoothing) * nll_BT - label_smoothing * logp_BTV.mean(-1)
    if z_loss:
        smooth_BT = smooth_BT + z_loss * jax.nn.logsumexp(logits_BTV, axis=-1) ** 2
    w_BT = mask_BT.astype(jnp.float32)
    correct_BT = (jnp.argmax(logp_BTV, -1) == targets_BT).astype(jnp.float32)
    return {
        "loss": (smooth_BT * w_BT).sum(),
        "nll": (nll_BT * w_BT).sum(),
        "correct": (correct_BT * w_BT).sum(),
        "tokens": w_BT.sum(),
    }


def _tree_where(cond, new, old):
    return jax.tree.map(lambda a, b: jnp.where(cond, a, b), new, old)


def train_step(spec: StepSpec, state: TrainState, batch: dict) -> tuple[TrainState, dict]:
    """One update. A non-finite loss, or a loss above divergence_loss for divergence_patience
    updates in a row, sets `diverged_at`; then the parameters stay frozen (the caller stops).

    Returns:
      (new state, metrics): loss and nll (per token), lr, grad_norm (before clipping), update_norm,
      param_norm, tokens.
    """
    hp = state.hparams
    rng = jax.random.fold_in(jax.random.wrap_key_data(state.rng, impl="rbg"), state.step)

    def loss_fn(params):
        model = nnx.merge(spec.graphdef, params, state.consts)
        sums = token_losses(*forward(model, spec.task, batch, rng), hp["label_smoothing"], model.cfg.z_loss)
        return sums["loss"] / jnp.maximum(sums["tokens"], 1.0), sums

    (loss, sums), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    grads, grad_norm = optimizers.clip_by_global_norm(grads, hp["clip_norm"])
    lr = learning_rate(spec.schedule, state.step, hp)
    updates, opt_state = optimizers.updates(
        spec.optimizer, grads, state.opt_state, state.params, lr, hp["weight_decay"]
    )
    params = optax.apply_updates(state.params, updates)
    # the placement's post-update hook (nGPT: every weight matrix back to unit norm along d); identity otherwise
    params = nnx.merge(spec.graphdef, params, state.consts).post_update(params)

    finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
    bad_steps = jnp.where(finite & (loss <= hp["divergence_loss"]), 0, state.bad_steps + 1)
    newly = (state.diverged_at < 0) & (~finite | (bad_steps >= hp["divergence_patience"]))
    diverged_at = jnp.where(newly, state.step + 1, state.diverged_at)
    healthy = diverged_at < 0
    new_state = state.replace(
        params=_tree_where(healthy, params, state.params),
        opt_state=_tree_where(healthy, opt_state, state.opt_state),
        step=state.step + 1,
        bad_steps=bad_steps,
        diverged_at=diverged_at,
    )
    metrics = {
        "loss": loss,
        "nll": sums["nll"] / jnp.maximum(sums["tokens"], 1.0),
        "lr": lr,
        "grad_norm": grad_norm,
        "update_norm": optimizers.global_norm(updates),
        "param_norm": optimizers.global_norm(params),
        "tokens": sums["tokens"],
    }
    return new_state, metrics


def vmapped_train_step(spec: StepSpec, states: TrainState, batches: dict):
    """train_step over a leading run axis of states and batches (runs that share shapes)."""
    return jax.vmap(lambda state, batch: train_step(spec, state, batch))(states, batches)


def eval_step(graphdef: nnx.GraphDef, task: str, params: nnx.State, consts: nnx.State, batch: dict) -> dict:
    """Deterministic masked sums (nll, correct, tokens) over one batch; add them up over batches."""
    model = nnx.merge(graphdef, params, consts)
    sums = token_losses(*forward(model, task, batch), 0.0)
    return {k: sums[k] for k in ("nll", "correct", "tokens")}


def _model_inputs(task: str, batch: dict):
    """(args, masks, {stack: mask_BT}) for normjax.probe."""
    if task == "seq2seq":
        masks = {"src_mask": batch["src_mask"], "tgt_mask": batch["tgt_mask"]}
        return (
            (batch["src"], batch["tgt_in"]),
            masks,
            {"encoder": batch["src_mask"], "decoder": batch["tgt_mask"]},
        )
    return (batch["tokens"],), {"padding_mask": batch["mask"]}, {"decoder": batch["mask"]}


def diagnostics(graphdef: nnx.GraphDef, task: str, params: nnx.State, consts: nnx.State, batch: dict) -> dict:
    """Gradient norm per layer (all params and FFN weights), the DeepNet LN-input diagnostic, attention and
    output logit maxima.

    Gradients are of the unsmoothed nll without dropout. The rms of a norm site is the mean over real tokens of
    ||x|| / sqrt(d) at the norm's input (a per-head site's token counts all its D entries; cross-attention keys
    and values are weighted by the source mask). `ln_input_rms` is, per stack and layer, the largest rms over
    that block's norm sites (0 for a block without any); `norm_input_rms` the largest over all layers, sites and
    the final norm (= max(ln_input_rms, final site, 0); about 1 at a healthy init, >> 1 when Post-LN's LN
    inputs blow up). `attn_logit_max` is, per layer, the largest self-attention logit (scaled, soft-capped,
    before the mask bias) over heads, real queries and the keys the mask allows them (causal, unpadded);
    `cross_logit_max` the same for a seq2seq decoder's cross-attention (keys: real source tokens); -inf when
    no (query, key) pair is real. `output_logit_mean` / `output_logit_max` are the mean and max of the output
    logits over real target tokens (the mean over tokens and vocab entries).

    Returns:
      {"grad_norm/<stack>": (L,), "ffn_grad_norm/<stack>": (L,), "norm_input_rms/<stack>": scalar,
      "ln_input_rms/<stack>": (L,), "attn_logit_max/<stack>": (L,), "cross_logit_max/decoder": (L,)
      (encoder_decoder only), "output_logit_mean": scalar, "output_logit_max": scalar}.
    """

    def nll(p):
        sums = token_losses(*forward(nnx.merge(graphdef, p, consts), task, batch), 0.0)
        return sums["nll"] / jnp.maximum(sums["tokens"], 1.0)

    grads = jax.grad(nll)(params)
    model = nnx.merge(graphdef, params, consts)
    args, masks, stack_masks = _model_inputs(task, batch)
    logits_BTV, probes = normjax.probe(model, *args, **masks)
    out = {}
    for stack in normjax.stack_names(model):
        layers = normjax.layer_params(grads, model, stack)
        out[f"grad_norm/{stack}"] = jnp.stack([optimizers.global_norm(g) for g in layers])
        out[f"ffn_grad_norm/{stack}"] = jnp.stack(
            [optimizers.global_norm({k: v for k, v in g.items() if k.startswith("ffn/")}) for g in layers]
        )
        sp = probes[stack]

        def site_rms(name, x_BTD, stack=stack):
            # cross-attention keys/values are encoder positions: weight them by the source mask
            w_BT = stack_masks["encoder" if name in ("cross.k", "cross.v") else stack]
            w_BT = w_BT.astype(jnp.float32)
            x_BTD = x_BTD.reshape(*x_BTD.shape[:2], -1)  # per-head sites (B, T, H, D/H): the token's D entries
            r_BT = jnp.linalg.norm(x_BTD.astype(jnp.float32), axis=-1) / jnp.sqrt(x_BTD.shape[-1])
            return (r_BT * w_BT).sum() / jnp.maximum(w_BT.sum(), 1.0)

        per_layer = [[site_rms(name, x) for name, x in block.items()] for block in sp.norm_inputs]
        rms = [jnp.zeros(())] + [r for block in per_layer for r in block]
        if sp.final_norm_input is not None:
            rms.append(site_rms("final", sp.final_norm_input))
        out[f"norm_input_rms/{stack}"] = jnp.max(jnp.stack(rms))
        out[f"ln_input_rms/{stack}"] = jnp.stack([jnp.max(jnp.stack([jnp.zeros(()), *b])) for b in per_layer])
        q_BT = stack_masks[stack].astype(bool)
        for sub, key in (("attn", "attn_logit_max"), ("cross", "cross_logit_max")):
            if sub not in sp.attn_logit_max[0]:
                continue
            out[f"{key}/{stack}"] = jnp.stack(
                [jnp.max(jnp.where(q_BT, block[sub], -jnp.inf)) for block in sp.attn_logit_max]
            )
    w_BT = stack_masks[normjax.stack_names(model)[-1]].astype(bool)
    logits_BTV = logits_BTV.astype(jnp.promote_types(logits_BTV.dtype, jnp.float32))
    w_BT1 = w_BT[..., None]
    count = jnp.maximum(w_BT.sum() * logits_BTV.shape[-1], 1)
    out["output_logit_mean"] = jnp.where(w_BT1, logits_BTV, 0.0).sum() / count
    out["output_logit_max"] = jnp.max(jnp.where(w_BT1, logits_BTV, -jnp.inf))
    return out
