"""Exact Jacobians of f(x) or f(params, x): jacfwd/jacrev or chunked JVPs/VJPs, compiled once per structure."""

from __future__ import annotations

import functools
import os
import resource
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from normjax.jacobian import checks, jaxpr_eval, traced

MODES = ("fwd", "rev")
# Peak bytes of an exact path per entry of J: J, jacfwd's/jacrev's stacked output before the transpose
# (or the SVD's copy and LAPACK's work space), and a margin for the linearization.
COPIES_OF_J = 3


def available_memory() -> int:
    """Bytes this process may still allocate on the host: MemAvailable (or physical memory), and under an
    address-space limit (`ulimit -v`, RLIMIT_AS) that limit minus the address space already in use."""
    avail = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    status = {}
    for path in ("/proc/meminfo", "/proc/self/status"):
        try:
            with open(path) as fh:
                status |= {k: int(v.split()[0]) * 1024 for k, v in (line.split(":", 1) for line in fh) if "kB" in v}
        except OSError:
            pass
    avail = min(avail, status.get("MemAvailable", avail))
    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    if limit != resource.RLIM_INFINITY:
        avail = min(avail, limit - status.get("VmSize", 0))
    return max(avail, 0)


def check_memory(out_size: int, in_size: int, dtype, what: str = "the exact Jacobian") -> None:
    """MemoryError, before anything is dispatched, when J (M x N) and its copies would not fit.

    An allocation that fails inside XLA can hang instead of raising (under an address-space limit), so
    the estimate comes first: COPIES_OF_J * M * N * itemsize against `available_memory`.
    """
    size = out_size * in_size * jnp.dtype(dtype).itemsize
    need, avail = COPIES_OF_J * size, available_memory()
    if need > avail:
        raise MemoryError(
            f"{what} is {out_size} x {in_size} {jnp.dtype(dtype).name} ({size / 2**30:.3g} GiB; about "
            f"{need / 2**30:.3g} GiB with its copies) but only {avail / 2**30:.3g} GiB of memory is available: use "
            "method='lanczos' (matrix-free, memory O(k (N + M))) or a smaller input."
        )


def _basis_map(lin_fn, size, chunk_size, dtype):
    """Stacks lin_fn(e_i) for the `size` basis vectors e_i, `chunk_size` of them at a time."""
    num_chunks = -(-size // chunk_size)
    idx_KC = jnp.arange(num_chunks * chunk_size).reshape(num_chunks, chunk_size)

    def chunk(idx_C):
        # Indices past `size` give all-zero rows of one_hot; they are sliced off below.
        return jax.vmap(lin_fn)(jax.nn.one_hot(idx_C, size, dtype=dtype))

    out_KCO = jax.lax.map(chunk, idx_KC)
    return out_KCO.reshape(num_chunks * chunk_size, -1)[:size]


def flat_jacobian(g: Callable, x_N: jax.Array, mode: str = "fwd", chunk_size: int | None = None):
    """(J_MN, g(x)) of a flat map g: R^N -> R^M; traceable (usable inside jit, vmap, grad)."""
    if chunk_size is None:
        transform = jax.jacfwd if mode == "fwd" else jax.jacrev
        J_MN, y_M = transform(lambda v: (lambda y: (y, y))(g(v)), has_aux=True)(x_N)
    elif mode == "fwd":
        y_M, jvp = jax.linearize(g, x_N)
        J_MN = _basis_map(jvp, x_N.size, chunk_size, x_N.dtype).T
    else:
        y_M, vjp = jax.vjp(g, x_N)
        J_MN = _basis_map(lambda u: vjp(u)[0], y_M.size, chunk_size, y_M.dtype)
    return J_MN, y_M


@functools.partial(jax.jit, static_argnames=("fn", "mode", "chunk_size"))
def _jacobian_impl(fn, args, x_N, mode, chunk_size):
    J_MN, y_M = flat_jacobian(functools.partial(fn, args), x_N, mode, chunk_size)
    return J_MN, checks.count_nonfinite(y_M), checks.count_nonfinite(J_MN)


ROUNDING_DRAWS = 2


@functools.partial(jax.jit, static_argnames=("fn", "mode"))
def _rounding_impl(fn, args, x_N, J_MN, mode):
    closed = jax.make_jaxpr(lambda a, z: flat_jacobian(functools.partial(fn, a), z, mode)[0])(args, x_N)
    flat_args = jax.tree.leaves((args, x_N))
    draws_DMN = jaxpr_eval.perturbed_draws(closed, flat_args, ROUNDING_DRAWS)
    return jnp.max(jnp.linalg.norm((draws_DMN - J_MN).reshape(ROUNDING_DRAWS, -1), axis=1))


def rounding_estimate(conv: traced.Converted, J_MN: jax.Array, mode: str = "fwd") -> float:
    """max over ROUNDING_DRAWS Monte Carlo arithmetic draws of the computation of J (`jaxpr_eval.perturbed_eval`)
    of ||J_draw - J||_F.

    An estimate of ||J_computed - J|| (Frobenius, above the spectral norm) that follows the function's
    own conditioning; it costs ROUNDING_DRAWS more Jacobians.
    """
    return float(_rounding_impl(conv.fn, conv.args, conv.x_N, J_MN, mode))


def validate(mode=None, chunk_size=None) -> None:
    """Checks the common keyword arguments of the Jacobian tools."""
    if mode is not None and mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}.")
    if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"chunk_size must be a positive int or None, got {chunk_size!r}.")


def prepare(f, x, params=None, stop_gradient: str = "constant") -> traced.Converted:
    """`traced.convert` plus the host-level check that x is finite."""
    conv = traced.convert(f, x, params, stop_gradient)
    traced.validate(conv)
    return conv


def jacobian_of(conv: traced.Converted, mode: str = "fwd", chunk_size: int | None = None) -> jax.Array:
    """The checked J_MN of an already converted function (see `jacobian`); refuses one that would not fit."""
    check_memory(conv.out_size, conv.x_N.size, conv.dtype)
    J_MN, bad_y, bad_J = _jacobian_impl(conv.fn, conv.args, conv.x_N, mode, chunk_size)
    checks.raise_if_nonfinite("f(x)", bad_y, J_MN.shape[0])
    checks.raise_if_nonfinite("the Jacobian", bad_J, J_MN.size)
    return J_MN


def jacobian(
    f: Callable,
    x: Any,
    *,
    params: Any = None,
    mode: str = "fwd",
    chunk_size: int | None = None,
    stop_gradient: str = "constant",
) -> jax.Array:
    """Exact Jacobian of `f` at `x` with respect to x, flattened to a matrix.

    Which Jacobian, where f calls `jax.lax.stop_gradient`: by default the one backpropagation uses (and
    `jax.jacfwd`, `jax.grad`): every stop_gradient operand a constant. Where f uses stop_gradient to change its
    gradient and not its value (GPAS: x - c sg(x) is (1 - c) x with derivative I), that differs from the derivative
    of the map f computes; `stop_gradient="identity"` gives the latter.

    Args:
      f: f(x), or f(params, x) when `params` is given, or an nnx.Module (module(x), its state an
        explicit argument). Everything f reads (closed-over arrays, module weights, params) is
        passed to the compiled program as an argument, so results always reflect current values,
        and functions of one structure (e.g. every block of a model) share one compiled program.
      x: floating array, or pytree of floating arrays (raveled in `jax.flatten_util.ravel_pytree`
        order); N = its total size.
      params: any pytree of arrays (held fixed: this is d f / d x), or None.
      mode: "fwd" (`jax.jacfwd`: N JVPs, best when N <= M) or "rev" (`jax.jacrev`: M VJPs).
      chunk_size: None computes all basis JVPs/VJPs in one `vmap`. An int linearizes `f` once and
        pushes `chunk_size` basis vectors at a time through `jax.lax.map`, so the working memory
        beyond J itself and one linearization is O(chunk_size * (N + M)).
      stop_gradient: "constant" (default: the backpropagated Jacobian) or "identity" (the forward map's:
        every stop_gradient replaced by the identity in f's traced jaxpr, inside any depth of `jax.jit`; one
        inside a scan, loop or cond raises ValueError; custom derivative rules are used as written).

    Returns:
      J_MN with J[i, j] = d ravel(f(x))[i] / d ravel(x)[j], shape (M, N). Cost: about N (fwd) or
      M (rev) forward passes, batched; memory M * N.

    Raises:
      TypeError: f not callable, x or f(x) not (a pytree of) floating arrays. ValueError: `x` has
      NaN/inf entries or a bad argument. FloatingPointError: f(x) or J has NaN/inf entries.
      MemoryError: J and its copies (`COPIES_OF_J` M N entries) would not fit in `available_memory()`.
    """
    validate(mode, chunk_size)
    return jacobian_of(prepare(f, x, params, stop_gradient), mode, chunk_size)


def token_blocks(
    f: Callable,
    x_TD: jax.Array,
    *,
    params: Any = None,
    mode: str = "fwd",
    chunk_size: int | None = None,
    stop_gradient: str = "constant",
) -> jax.Array:
    """Per-token Jacobian blocks of a sequence map f: (T, D) -> (T', D').

    Args:
      f, params: as in `jacobian`; f(x_TD) must be one 2-D array.
      x_TD: the input sequence.
      mode, chunk_size, stop_gradient: as in `jacobian`.

    Returns:
      An array of shape (T', T, D', D) whose [t, s] is the (D', D) block d y_t / d x_s. Same cost as
      `jacobian`.
    """
    if jnp.ndim(x_TD) != 2:
        raise ValueError(f"x_TD must be 2-D (T, D), got shape {jnp.shape(x_TD)}.")
    validate(mode, chunk_size)
    conv = prepare(f, x_TD, params, stop_gradient)
    out = conv.out_shapes
    if not isinstance(out, jax.ShapeDtypeStruct) or len(out.shape) != 2:
        raise ValueError(f"f must map (T, D) to one 2-D array, got {out}.")
    out_shape = out.shape
    J_MN = jacobian_of(conv, mode, chunk_size)
    T, D = jnp.shape(x_TD)
    return J_MN.reshape(out_shape[0], out_shape[1], T, D).transpose(0, 2, 1, 3)
