"""Hessian-vector products and the top eigenvalue of a (diagonally preconditioned) Hessian, matrix-free."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from normjax.jacobian import krylov


def hvp(loss: Callable, params, v, *args):
    """H v, H the Hessian of loss(params, *args) in `params`, by forward-over-reverse (the jvp of the gradient).

    Args:
      loss: scalar function loss(params, *args) of a pytree of floating arrays.
      params, v: pytrees of the same structure (v the direction).

    Returns:
      H v, a pytree like `params`; costs about one gradient evaluation more than the gradient itself.
    """
    return jax.jvp(lambda p: jax.grad(loss)(p, *args), (params,), (v,))[1]


def adam_preconditioner(nu, count, b2: float, eps: float):
    """Adam's diagonal preconditioner P = sqrt(nu_hat) + eps, nu_hat = nu / (1 - b2^count) the bias-corrected
    second moment after `count` updates (optax's ScaleByAdamState.nu and .count): the update is m_hat / P."""

    def one(n):
        correction = 1.0 - jnp.asarray(b2, n.dtype) ** jnp.maximum(jnp.asarray(count, n.dtype), 1.0)
        return jnp.sqrt(n / correction) + jnp.asarray(eps, n.dtype)

    return jax.tree.map(one, nu)


def adam_threshold(lr: float, b1: float) -> float:
    """The stability threshold of Adam's preconditioned sharpness, (2 + 2 b1) / ((1 - b1) lr): the largest stable
    eigenvalue of P^-1 H for heavy-ball momentum b1 on a quadratic (Cohen et al. 2022, "Adaptive gradient methods
    at the edge of stability", arXiv 2207.14484: 38 / lr at b1 = 0.9); with b1 = 0 it is gradient descent's 2 / lr."""
    return (2.0 + 2.0 * b1) / ((1.0 - b1) * lr)


class Sharpness(NamedTuple):
    """The top eigenvalue of S = P^-1/2 H P^-1/2 (similar to P^-1 H, so the same eigenvalues).

    value: lambda_max(S), the largest (algebraic) eigenvalue: the Rayleigh quotient at the top singular vector when
      that eigenvalue is positive; when the dominant eigenvalue is negative, a second Lanczos run on S + |it| I
      (positive semidefinite) gives lambda_max + |it| (its absolute error is then relative to 2 |lambda_min|).
    magnitude: the largest singular value of S, max |lambda(S)|, from Golub-Kahan-Lanczos.
    residual: Lanczos' bound relative to `magnitude` (the larger of the two runs' when there were two).
    steps: Krylov steps taken in all (two Hessian-vector products each).
    """

    value: jax.Array
    magnitude: jax.Array
    residual: jax.Array
    steps: jax.Array


@functools.partial(jax.jit, static_argnames=("loss", "max_dim"))
def _top(loss, params, precond, args, v0_N, max_dim, tol):
    x_N, unravel = ravel_pytree(params)
    d_N = jnp.ones_like(x_N) if precond is None else 1.0 / jnp.sqrt(ravel_pytree(precond)[0].astype(x_N.dtype))

    def whitened_grad(z_N):  # its Jacobian at z = 0 is D^-1/2 H D^-1/2
        return d_N * ravel_pytree(jax.grad(loss)(unravel(x_N + d_N * z_N), *args))[0].astype(x_N.dtype)

    def top(shift):  # the top singular value of S + shift I and the Rayleigh quotient of S at its Ritz vector
        g = lambda z_N: whitened_grad(z_N) + shift * z_N
        theta_K, steps, rel, bad, (_, v) = krylov.lanczos(g, z_N, v0_N, 1, max_dim, tol, vectors=1)
        v_N = jnp.reshape(v, (-1, x_N.size))[0]  # the top right Ritz vector
        return theta_K[0], jnp.vdot(v_N, jax.jvp(whitened_grad, (z_N,), (v_N,))[1]), rel, steps, bad

    z_N = jnp.zeros_like(x_N)
    magnitude, value, rel, steps, bad = top(jnp.zeros((), x_N.dtype))

    def shifted(_):  # the dominant eigenvalue is negative: S + |lambda_min| I is PSD, its top is lambda_max + shift
        theta, _, rel2, steps2, _ = top(magnitude)
        return theta - magnitude, jnp.maximum(rel, rel2 * theta / jnp.maximum(magnitude, 1e-30)), steps + steps2

    value, rel, steps = jax.lax.cond(value < 0, shifted, lambda _: (value, rel, steps), None)
    nan = jnp.asarray(jnp.nan, x_N.dtype)
    return Sharpness(jnp.where(bad > 0, nan, value), jnp.where(bad > 0, nan, magnitude), rel, steps)


def top_eigenvalue(
    loss: Callable, params, *args, precond=None, max_dim: int = 30, tol: float = 1e-3, key=None
) -> Sharpness:
    """The top eigenvalue of P^-1 H (the preconditioned sharpness; P = I: the sharpness lambda_max(H)).

    Computed as the symmetric D^-1/2 H D^-1/2 (D = diag(P)) through the project's Golub-Kahan-Lanczos
    (`krylov.lanczos`, full reorthogonalization) on z -> D^-1/2 grad loss(params + D^-1/2 z), whose Jacobian at
    z = 0 is that matrix: every product is a Hessian-vector product (jvp of grad), H is never formed. Compiled
    once per (loss, parameter structure, max_dim): params, precond and args are traced.

    Args:
      loss: scalar loss(params, *args); pass the same function object to reuse the compiled program.
      params: pytree of floating arrays; N = its size.
      *args: the loss's other inputs (a batch).
      precond: pytree like params of P's diagonal (> 0), e.g. `adam_preconditioner`; None for P = I.
      max_dim: Krylov dimension cap (static, <= N).
      tol: stop when Lanczos' residual bound is <= tol relative to the top value.
      key: PRNG key of the start vector (default key 0).

    Returns:
      A `Sharpness` (nan values when the gradient at params is not finite).
    """
    n = ravel_pytree(params)[0]
    v0_N = krylov.random_vectors(jax.random.key(0) if key is None else key, n.shape, n.dtype)
    return _top(loss, params, precond, args, v0_N, min(max_dim, n.size), tol)
