"""GI-Adam (Adam's second moment initialized from the first gradient) and warmup of one half of the stack only."""

# Kalra & Barkeshli 2024, "Why Warmup the Learning Rate? Underlying Mechanisms and Improvements" (arXiv
# 2406.09405). What they measured: with SGD and Adam on fully connected nets, ResNets and Transformers (image
# classification and language modelling), warmup's main benefit is that the network tolerates a larger target lr
# because warmup carries it into better-conditioned regions (lower (preconditioned) sharpness); for Adam they
# trace early instability to the large preconditioned sharpness when the second moment starts at 0, and propose
# initializing it from the gradient ("GI-Adam"), reporting benefits similar to warmup. How we differ: byte-level
# LMs with norm placements (Post-LN, Pre-LN, ...), a few hundred steps, CPU scale; our GI-Adam keeps Adam's bias
# correction of the first moment and drops it for the second (nu starts at g_0^2, an estimate of E[g^2] from the
# first step on, so dividing by 1 - b2^t would shrink the early updates by up to sqrt(1 - b2): a second warmup).
# We could not read the paper's algorithm box here; if it corrects nu too, `scale_by_gi_adam` differs from it
# there (a rule citing it says so).

from __future__ import annotations

import re
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

GI_ADAM = "gi_adam"
PARTS = ("top", "bottom", "all")  # which half of the stack a layer-wise warmup ramps ("all": the whole model)
HORIZONS = (1, 2, 4, 8, 16)  # layer-wise warmup lengths in Adam horizons H = 1/(1 - b2)
_LAYERWISE = re.compile(r"adam_warmup_(top|bottom|all)_(\d+)h")


def layerwise_name(part: str, horizons: int) -> str:
    """The optimizer name of Adam with a linear warmup of `horizons` x H applied to `part` of the stack only."""
    return f"adam_warmup_{part}_{horizons}h"


NAMES = (GI_ADAM, *(layerwise_name(p, k) for p in PARTS for k in HORIZONS))  # registered in optimizers.OPTIMIZERS


class GIAdamState(NamedTuple):
    count: jax.Array  # updates done
    mu: Any
    nu: Any


def scale_by_gi_adam(b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> optax.GradientTransformation:
    """Adam whose second moment starts at the first gradient's square (GI-Adam, Kalra & Barkeshli 2024).

    With g_1 the first gradient: nu_0 = g_1^2, then nu_t = b2 nu_{t-1} + (1 - b2) g_t^2 (so nu_1 = g_1^2) and
    mu_t = b1 mu_{t-1} + (1 - b1) g_t (mu_0 = 0); the update direction is
    (mu_t / (1 - b1^t)) / (sqrt(nu_t) + eps), with no bias correction of nu (it is not biased towards 0). The
    first update equals Adam's (g / (|g| + eps)); later ones remember g_1^2 with weight b2^t where Adam's
    bias-corrected nu forgets it, so they stay smaller while the gradients shrink from their initial size.
    """

    def init(params):
        zeros = jax.tree.map(jnp.zeros_like, params)
        return GIAdamState(jnp.zeros((), jnp.int32), zeros, jax.tree.map(jnp.zeros_like, params))

    def update(updates, state, params=None):
        del params
        first = state.count == 0
        nu = jax.tree.map(lambda n, g: jnp.where(first, jnp.square(g), n), state.nu, updates)
        nu = jax.tree.map(lambda n, g: b2 * n + (1 - b2) * jnp.square(g), nu, updates)
        mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state.mu, updates)
        count = state.count + 1
        correction = 1 - jnp.asarray(b1, jnp.float32) ** count.astype(jnp.float32)
        out = jax.tree.map(lambda m, n: (m / correction.astype(m.dtype)) / (jnp.sqrt(n) + eps), mu, nu)
        return out, GIAdamState(count, mu, nu)

    return optax.GradientTransformation(init, update)


def _key_name(key) -> str:
    return str(getattr(key, "key", getattr(key, "name", getattr(key, "idx", key))))


def warmed_masks(params, part: str):
    """Per leaf, 1 where `part` of the stack is warmed up and 0 where not (broadcastable to the leaf).

    A stack of L layers is split at L // 2: the bottom half is layers 0 .. L//2 - 1 with the embeddings, the top
    half the rest with everything outside the stacks but the embeddings (final norm, head). A scanned stack
    (leading layer axis) gets a per-layer mask along that axis. "all" warms every leaf.
    """
    paths = [[_key_name(k) for k in path] for path, _ in jax.tree_util.tree_leaves_with_path(params)]
    depth: dict[str, int] = {}  # stack name -> number of layers (unscanned stacks: from the layer indices)
    for names in paths:
        if "stacks" in names and "layers" in names:
            at = names.index("layers") + 1
            if at < len(names) and names[at].isdigit():
                stack = names[names.index("stacks") + 1]
                depth[stack] = max(depth.get(stack, 0), int(names[at]) + 1)

    def one(path, x):
        if part == "all":
            return jnp.ones((), x.dtype)
        names = [_key_name(k) for k in path]
        if "stacks" in names and "layers" in names:
            stack, at = names[names.index("stacks") + 1], names.index("layers") + 1
            if at < len(names) and names[at].isdigit():
                top = int(names[at]) >= depth[stack] // 2
            else:  # scanned: axis 0 is the layer
                layers = jnp.arange(x.shape[0])
                top = (layers >= x.shape[0] // 2).reshape((-1,) + (1,) * (x.ndim - 1))
                return jnp.asarray(top if part == "top" else ~top, x.dtype)
        else:
            top = "embedders" not in names
        return jnp.ones((), x.dtype) if top == (part == "top") else jnp.zeros((), x.dtype)

    return jax.tree_util.tree_map_with_path(one, params)


class RampState(NamedTuple):
    count: jax.Array  # updates done


def warmup_part(part: str, warmup_steps: int) -> optax.GradientTransformation:
    """Scales the updates of `part` of the stack (`warmed_masks`) by min(t / warmup_steps, 1), t the updates done
    before this one, and leaves the rest untouched.

    Run under the fair-control schedule without warmup (warmup_then_inverse_sqrt, warmup_steps 0, decay_start >=
    warmup_steps), the warmed part then follows exactly the lr of the same schedule with warmup_steps (its linear
    ramp from 0, warmup_init_lr 0) and the untouched part the peak lr from step 0: warmup on part of the stack.
    """
    if part not in PARTS:
        raise ValueError(f"unknown part {part!r}; valid: {', '.join(PARTS)}")

    def init(params):
        del params
        return RampState(jnp.zeros((), jnp.int32))

    def update(updates, state, params=None):
        t = state.count.astype(jnp.float32)
        ramp = jnp.where(t < warmup_steps, t / max(warmup_steps, 1), 1.0)
        masks = warmed_masks(updates, part)
        out = jax.tree.map(lambda u, m: u * (m * ramp.astype(u.dtype) + (1 - m)), updates, masks)
        return out, RampState(state.count + 1)

    return optax.GradientTransformation(init, update)


def layerwise_parts(name: str) -> tuple[str, int] | None:
    """(part, horizons) of a layer-wise warmup optimizer name (`layerwise_name`), None for another name."""
    match = _LAYERWISE.fullmatch(name)
    return None if match is None else (match.group(1), int(match.group(2)))


def direction(name: str, b1: float, b2: float, eps: float) -> optax.GradientTransformation:
    """The update direction of a name in NAMES: GI-Adam, or Adam followed by `warmup_part` over k x H steps
    (H = round(1 / (1 - b2)), Adam's second-moment horizon)."""
    if name == GI_ADAM:
        return scale_by_gi_adam(b1=b1, b2=b2, eps=eps)
    part, horizons = layerwise_parts(name) or (None, None)
    if part is None:
        raise ValueError(f"unknown optimizer {name!r}; valid here: {', '.join(NAMES)}")
    return optax.chain(optax.scale_by_adam(b1=b1, b2=b2, eps=eps), warmup_part(part, horizons * horizon(b2)))


def horizon(b2: float) -> int:
    """Adam's second-moment horizon 1 / (1 - b2), in steps."""
    return round(1.0 / (1.0 - b2))
