"""Exact Jacobians of a pure function of one array: jacfwd/jacrev or chunked JVPs/VJPs."""

import functools

import jax
import jax.numpy as jnp

from normjax.jacobian import checks

MODES = ("fwd", "rev")


def flat_fn(f, shape):
    """Returns g: R^N -> R^M with g(x.ravel()) = f(x).ravel() for x of `shape`."""

    def g(x_N):
        return jnp.ravel(f(x_N.reshape(shape)))

    return g


def _basis_map(lin_fn, size, chunk_size, dtype):
    """Stacks lin_fn(e_i) for the `size` basis vectors e_i, `chunk_size` of them at a time."""
    num_chunks = -(-size // chunk_size)
    idx_KC = jnp.arange(num_chunks * chunk_size).reshape(num_chunks, chunk_size)

    def chunk(idx_C):
        # Indices past `size` give all-zero rows of one_hot; they are sliced off below.
        return jax.vmap(lin_fn)(jax.nn.one_hot(idx_C, size, dtype=dtype))

    out_KCO = jax.lax.map(chunk, idx_KC)
    return out_KCO.reshape(num_chunks * chunk_size, -1)[:size]


@functools.partial(jax.jit, static_argnames=("f", "mode", "chunk_size"))
def _jacobian_impl(f, x, mode, chunk_size):
    g = flat_fn(f, x.shape)
    x_N = jnp.ravel(x)
    if chunk_size is None:
        transform = jax.jacfwd if mode == "fwd" else jax.jacrev
        J_MN, y_M = transform(lambda v: (lambda y: (y, y))(g(v)), has_aux=True)(x_N)
    elif mode == "fwd":
        y_M, jvp = jax.linearize(g, x_N)
        J_MN = _basis_map(jvp, x_N.size, chunk_size, x_N.dtype).T
    else:
        y_M, vjp = jax.vjp(g, x_N)
        J_MN = _basis_map(lambda u: vjp(u)[0], y_M.size, chunk_size, y_M.dtype)
    return J_MN, checks.count_nonfinite(y_M), checks.count_nonfinite(J_MN)


def validate(f, x, mode=None, chunk_size=None):
    """Checks the common arguments of the Jacobian tools; returns `x` as a floating JAX array."""
    if not callable(f):
        raise TypeError(f"f must be a callable of one array, got {type(f).__name__}.")
    if mode is not None and mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}.")
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"chunk_size must be a positive int or None, got {chunk_size!r}.")
    x = checks.require_float("x", x)
    checks.require_finite("x", x)
    return x


def jacobian(f, x, *, mode: str = "fwd", chunk_size: int | None = None) -> jax.Array:
    """Exact Jacobian of `f` at `x`, flattened to a matrix.

    Args:
      f: a pure, hashable JAX function of one array (the compiled Jacobian is cached per `f`, so
        pass the same function object to reuse it).
      x: floating array of any shape; N = x.size.
      mode: "fwd" (`jax.jacfwd`: N JVPs, best when N <= M) or "rev" (`jax.jacrev`: M VJPs).
      chunk_size: None computes all basis JVPs/VJPs in one `vmap`. An int linearizes `f` once and
        pushes `chunk_size` basis vectors at a time through `jax.lax.map`, so the working memory
        beyond J itself and one linearization is O(chunk_size * (N + M)).

    Returns:
      J_MN with J[i, j] = d f(x).ravel()[i] / d x.ravel()[j], shape (f(x).size, x.size). Cost: about
      N (fwd) or M (rev) forward passes, batched; memory M * N.

    Raises:
      ValueError: `x` has NaN/inf entries. FloatingPointError: f(x) or J has NaN/inf entries.
    """
    x = validate(f, x, mode, chunk_size)
    J_MN, bad_y, bad_J = _jacobian_impl(f, x, mode, chunk_size)
    checks.raise_if_nonfinite("f(x)", bad_y, J_MN.shape[0])
    checks.raise_if_nonfinite("the Jacobian", bad_J, J_MN.size)
    return J_MN


def token_blocks(f, x_TD, *, mode: str = "fwd", chunk_size: int | None = None) -> jax.Array:
    """Per-token Jacobian blocks of a sequence map f: (T, D) -> (T', D').

    Args:
      f: pure function of one (T, D) array returning a 2-D array (T', D').
      x_TD: the input sequence.
      mode, chunk_size: as in `jacobian`.

    Returns:
      An array of shape (T', T, D', D) whose [t, s] is the (D', D) block d y_t / d x_s. Same cost as
      `jacobian`.
    """
    if jnp.ndim(x_TD) != 2:
        raise ValueError(f"x_TD must be 2-D (T, D), got shape {jnp.shape(x_TD)}.")
    x_TD = validate(f, x_TD, mode, chunk_size)
    out_shape = jax.eval_shape(f, x_TD).shape
    if len(out_shape) != 2:
        raise ValueError(f"f must map (T, D) to a 2-D array, got output shape {out_shape}.")
    J_MN = jacobian(f, x_TD, mode=mode, chunk_size=chunk_size)
    T, D = x_TD.shape
    return J_MN.reshape(out_shape[0], out_shape[1], T, D).transpose(0, 2, 1, 3)
