"""`materialize_cotangent`: an identity that makes XLA CPU store the residual stream's gradient once per block."""

from __future__ import annotations

import jax


def _stored(tangent, predicate):
    """The tangent through a conditional: XLA cannot fuse across one, so its operand is computed and stored once."""
    return jax.lax.cond(predicate, lambda t: t * 1, lambda t: t * 1, tangent)


@jax.custom_jvp
def _materialize(x):
    return x


@_materialize.defjvp
def _materialize_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    if x.size == 0:  # nothing to store, and no element to build the predicate from
        return x, t
    first = x.reshape(-1)[0]
    # A predicate XLA cannot fold (NaN != NaN); both branches are the identity, so its value never matters.
    return x, _stored(t, first == first)


def materialize_cotangent(x, enabled: bool | None = None):
    """x unchanged, its forward value and derivatives exact; on the CPU backend its tangent and cotangent pass a
    `lax.cond` whose two branches are the identity.

    Why: in a residual stack the backward pass sums the stream's gradient, dx_l = dx_(l+1) + (branch terms).
    XLA's CPU fusion duplicates that chain of adds into every consumer of dx_l (each transpose feeding a weight
    gradient), so a looped L-layer step recomputes O(L) adds per consumer: quadratic time and compile time in
    depth (`benchmarks/README.md`, "Issue 15"). A conditional is a fusion boundary XLA does not remove, so the sum
    is computed once and read from memory. `optimization_barrier` does not do this (XLA CPU drops it before
    fusion). A custom JVP, not a custom VJP, so forward-mode Jacobians (`jax.jacfwd`) keep working; the
    backward pass is its transpose. `enabled=None` applies it on the CPU backend only, where it was measured;
    elsewhere x is returned as is. `x` may be any pytree of float arrays.
    """
    if enabled is None:
        enabled = jax.default_backend() == "cpu"
    return jax.tree.map(_materialize, x) if enabled else x
