"""Optimizers whose learning rate, clipping and weight decay are traced inputs."""

import dataclasses

import jax
import jax.numpy as jnp
import optax

from normjax.train import completep as completep_rules
from normjax.train import gi_adam

# gi_adam.NAMES: GI-Adam and Adam with warmup on part of the stack (the answer study's interventions)
OPTIMIZERS = ("adam", "adamw", "sgd", "radam", "muon", *gi_adam.NAMES)

# Muon's update RMS matched to AdamW's (Liu et al. 2025, arXiv 2502.16982), so one lr serves both branches.
MUON_RMS = 0.2


@dataclasses.dataclass(frozen=True)
class OptimizerSpec:
    """The static part of an optimizer (it selects the update rule); hashable, a jit static."""

    name: str = "adam"
    b1: float = 0.9
    b2: float = 0.98
    eps: float = 1e-9
    momentum: float = 0.9
    nesterov: bool = False
    completep: completep_rules.CompleteP | None = None  # per-group lr / eps / weight decay (None: one for all)

    def __post_init__(self):
        if self.name not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {self.name!r}; valid choices: {', '.join(OPTIMIZERS)}")
        if self.completep is not None and self.name not in ("adam", "adamw"):
            raise ValueError(f"CompleteP's rules are for Adam / AdamW (its eps rule), not optimizer {self.name!r}")


def _key_name(key) -> str:
    return str(getattr(key, "key", getattr(key, "name", getattr(key, "idx", key))))


def muon_dimensions(params):
    """Muon's dimension numbers per leaf: the kernels of the blocks (under "stacks"; a scanned stack's
    leading layer axis is a batch axis) as (reduction -2, output -1); None (Adam) for embeddings, the head,
    norms, biases, gains and scalars."""

    def one(path, x):
        names = [_key_name(k) for k in path]
        hidden = "stacks" in names and "kernel" in names and x.ndim >= 2
        return optax.contrib.MuonDimensionNumbers(reduction_axis=-2, output_axis=-1) if hidden else None

    return jax.tree_util.tree_map_with_path(one, params)


def direction(spec: OptimizerSpec) -> optax.GradientTransformation:
    """The update direction before the (traced) lr: Adam/RAdam moments, SGD momentum or Muon.

    Muon is `optax.contrib.muon` (Newton-Schulz orthogonalized momentum, beta = `momentum`, Nesterov if
    `nesterov`) on the blocks' weight matrices (`muon_dimensions`) and optax's Adam (b1, b2, eps; Nesterov
    too if `nesterov`, as optax does) on the rest, with the Muon update scaled to RMS MUON_RMS.
    """
    if spec.name == "muon":
        return optax.contrib.muon(
            learning_rate=-1.0,  # scale_by_learning_rate(-1) multiplies by +1: the lr comes in updates()
            beta=spec.momentum,
            eps=spec.eps,
            nesterov=spec.nesterov,
            adam_b1=spec.b1,
            adam_b2=spec.b2,
            muon_weight_dimension_numbers=muon_dimensions,
            consistent_rms=MUON_RMS,
        )
    if spec.completep is not None:
        return completep_rules.direction(spec.completep, spec.b1, spec.b2, spec.eps)
    if spec.name in gi_adam.NAMES:
        return gi_adam.direction(spec.name, spec.b1, spec.b2, spec.eps)
    if spec.name in ("adam", "adamw"):
        return optax.scale_by_adam(b1=spec.b1, b2=spec.b2, eps=spec.eps)
    if spec.name == "radam":
        return optax.scale_by_radam(b1=spec.b1, b2=spec.b2, eps=spec.eps)
    return optax.trace(decay=spec.momentum, nesterov=spec.nesterov)


def global_norm(tree) -> jnp.ndarray:
    """sqrt of the sum of squares of every leaf, in float32 or wider."""
    wide = lambda x: x.astype(jnp.promote_types(x.dtype, jnp.float32))
    return jnp.sqrt(sum(jnp.sum(jnp.square(wide(x))) for x in jax.tree.leaves(tree)))


def clip_by_global_norm(grads, max_norm):
    """Rescale grads to global norm <= max_norm; max_norm <= 0 (traced) means no clipping."""
    norm = global_norm(grads)
    scale = jnp.where((max_norm > 0) & (norm > max_norm), max_norm / jnp.maximum(norm, 1e-30), 1.0)
    return jax.tree.map(lambda g: (g * scale).astype(g.dtype), grads), norm


def updates(spec: OptimizerSpec, grads, opt_state, params, lr, weight_decay):
    """One update: -lr * (direction + weight_decay * param), decay on matrices only (AdamW style).

    Args:
      spec: static optimizer choice.
      grads, params: pytrees of the same structure.
      opt_state: from `direction(spec).init(params)`.
      lr, weight_decay: traced scalars; weight decay is decoupled (on the update, not the gradient).

    Returns:
      (updates, new_opt_state); apply with `optax.apply_updates(params, updates)`.

    With `spec.completep` the lr and weight decay of each group are multiplied by its CompleteP multipliers
    (`normjax.train.completep`), and decay is on the embedding and hidden weight groups only.
    """
    step_dir, opt_state = direction(spec).update(grads, opt_state, params)
    if spec.completep is not None:
        return completep_rules.updates(spec.completep, step_dir, params, lr, weight_decay), opt_state

    def one(u, p):
        decay = weight_decay * p if p.ndim >= 2 else jnp.zeros_like(p)
        return (-lr * (u + decay)).astype(p.dtype)

    return jax.tree.map(one, step_dir, params), opt_state
