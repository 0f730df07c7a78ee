"""The modded-nanogpt speedrun's value residual and x0-skip lambdas: the SkipStream state and its two mixes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

VALUE_LAMBDA_INIT = 0.5  # lam_l: `self.lamb = nn.Parameter(torch.tensor(0.5))`
X0_LAMBDAS_INIT = (1.0, 0.0)  # (a_l, c_l): `self.lambdas = nn.Parameter(torch.tensor([1., 0.]))`


@struct.dataclass
class SkipStream:
    """What a block of a stack with the value residual or the x0 lambdas maps, a pytree of (B, T, D) arrays.

    `x` is the residual stream, `x0` the stack's input stream (the embedding output; None without the x0 lambdas),
    `v1` block 0's value projection (None without the value residual; zeros until block 0 writes it, so every
    block's state has one structure). Not an array on purpose (as `DualStream`): `jnp` functions refuse it. The
    stack reads out `x`; `normjax.jacobian` flattens all three, so a block Jacobian is (3TD, 3TD) with both on.
    """

    x: jax.Array
    x0: jax.Array | None = None
    v1: jax.Array | None = None


def initial_state(x, *, x0_lambdas: bool, value_residual: bool) -> SkipStream:
    """SkipStream(x_0, x_0, 0): x0 is the stack input (`x0 = x` in the speedrun), v1 a placeholder for block 0."""
    return SkipStream(x, x if x0_lambdas else None, jnp.zeros_like(x) if value_residual else None)


def mix_x0(state: SkipStream, lambdas) -> jax.Array:
    """a_l x + c_l x0 at the start of block l (the identity without the x0 lambdas).

    KellerJordan/modded-nanogpt `records/track_1_short/2024-11-06_ShortcutsTweaks/dd7304a6-...txt` line 209.
    """
    if lambdas is None:
        return state.x
    a, c = lambdas.astype(state.x.dtype)
    return a * state.x + c * state.x0


def mix_value(v, v1, lam, first):
    """((1 - lam) v + lam v_1, v_1): v_1 is v itself in block 0 (`first`), else the carried block-0 value.

    The same file, lines 175-177 (`if v1 is None: v1 = v`, then `v = (1 - self.lamb) * v + self.lamb * v1`).
    """
    v1 = jnp.where(first, v, v1)
    lam = lam.astype(v.dtype)
    return (1 - lam) * v + lam * v1, v1
