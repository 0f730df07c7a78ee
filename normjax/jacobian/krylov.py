"""Matrix-free cores on a flat map g: R^N -> R^M (traceable): power iteration, Golub-Kahan-Lanczos, Hutchinson."""

# Every core is a plain function of arrays, usable inside `jit`, `vmap` and `grad`; the host-level
# entry points (`spectral.py`) compile them once per structure through `traced.PureFn`.

import jax
import jax.numpy as jnp
import numpy as np

from normjax.jacobian import checks, jaxpr_eval

ROUNDING_DRAWS = 2  # Monte Carlo arithmetic draws behind `certify`'s estimate of f's own rounding
ROUNDOFF = 0.5  # each draw moves every rounding by the unit roundoff eps / 2, its largest size, signs random


def linear_ops(g, x_N):
    """Linearizes g at x once; returns g(x), v -> J v and u -> J^T u (never J itself).

    g must map x's dtype to the same dtype (the working dtype, `checks.working_dtype`): every Krylov
    vector then has it.
    """
    y_M, jvp = jax.linearize(g, x_N)
    if y_M.dtype != x_N.dtype:
        raise TypeError(f"g must return x's dtype {x_N.dtype}, got {y_M.dtype}; cast with checks.working_dtype.")
    vjp = jax.linear_transpose(jvp, x_N)
    return y_M, jvp, lambda u_M: vjp(u_M)[0]


def _unit(v):
    return v / jnp.linalg.norm(v)


def random_vectors(key, shape, dtype, kind: str = "normal") -> jax.Array:
    """Gaussian or Rademacher draws from NumPy, seeded by the JAX `key`.

    Drawn on the host because a threefry draw costs ~0.3 s of XLA compilation per shape on CPU,
    more than most of the matrix-free runs it starts.
    """
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    rng = np.random.default_rng(np.asarray(key, np.uint32).ravel())
    if kind == "rademacher":
        return jnp.asarray((rng.integers(0, 2, size=shape) * 2 - 1).astype(dtype))
    return jnp.asarray(rng.standard_normal(size=shape).astype(dtype))


def _hash_vector(seed, n, dtype):
    """A cheap, deterministic pseudo-random vector in [-1/2, 1/2)^n (lowbias32 integer hash).

    Used for Lanczos restart directions inside the loop, where a threefry draw would be costly to
    compile; any direction with a component outside the current Krylov basis does.
    """
    h = jnp.arange(n, dtype=jnp.uint32) * jnp.uint32(0x9E3779B9) + seed.astype(jnp.uint32)
    for shift, mult in ((16, 0x7FEB352D), (15, 0x846CA68B)):
        h = (h ^ (h >> shift)) * jnp.uint32(mult)
    h = h ^ (h >> 16)
    return h.astype(dtype) * (1.0 / 2**32) - 0.5


def power_triplet(jvp, vjp, v_N):
    """(s, u, residual) of a unit v: s = ||J v||, u = J v / s, residual = ||J^T u - s v||.

    J v = s u holds exactly, so (s, u, v) is a singular triplet of J up to the residual: some
    singular value of J lies within `residual` of s (the symmetric residual bound applied to
    [[0, J], [J^T, 0]] and (u, v) / sqrt(2)).
    """
    w_M = jvp(v_N)
    s = jnp.linalg.norm(w_M)
    u_M = w_M / jnp.where(s > 0, s, 1)
    z_N = vjp(u_M)
    return s, u_M, jnp.linalg.norm(z_N - s * v_N), z_N


def power(g, x_N, v0_N, num_iters, tol):
    """Power iteration on J^T J from v0 until residual <= tol * s.

    Returns (s, v_N, u_M, steps, residual bound (absolute), #non-finite g(x)); see `power_triplet`.
    """
    y_M, jvp, vjp = linear_ops(g, x_N)
    tiny = jnp.finfo(x_N.dtype).tiny

    def body(state):
        i, v_N, _, _, _, z_N = state
        z_norm = jnp.linalg.norm(z_N)
        v_N = jnp.where(z_norm > tiny, z_N / jnp.maximum(z_norm, tiny), v_N)
        s, u_M, res, z_N = power_triplet(jvp, vjp, v_N)
        return i + 1, v_N, u_M, s, res, z_N

    def cond(state):
        i, _, _, s, res, _ = state
        return (i < num_iters) & (res > tol * s)

    v0_N = _unit(v0_N)
    s, u_M, res, z_N = power_triplet(jvp, vjp, v0_N)
    init = (jnp.int32(1), v0_N, u_M, s, res, z_N)
    i, v_N, u_M, s, res, _ = jax.lax.while_loop(cond, body, init)
    return s, v_N, u_M, i, res, checks.count_nonfinite(y_M)


def _orthonormalize(w, Q, seed, scale):
    """w minus its projection on the rows of Q, normalized; returns (unit vector, norm).

    Full reorthogonalization, with a second pass only when the first removed most of w (Kahan and
    Parlett's "twice is enough"). On breakdown (w in span(Q) up to rounding) returns a random
    unit vector orthogonal to Q and a norm of 0, so the bidiagonalization restarts in a fresh
    direction instead of dividing by ~0. Each pass reads Q once: O(max_dim n) memory traffic.
    """

    def project_out(v):
        return v - Q.T @ (Q @ v)

    norm0 = jnp.linalg.norm(w)
    w = project_out(w)
    w = jax.lax.cond(jnp.linalg.norm(w) < 0.7 * norm0, project_out, lambda v: v, w)
    norm = jnp.linalg.norm(w)
    tiny = jnp.finfo(w.dtype).tiny

    def restart(_):
        r = project_out(project_out(_hash_vector(seed, w.size, w.dtype)))
        return r / jnp.maximum(jnp.linalg.norm(r), tiny), jnp.zeros((), w.dtype)

    def keep(_):
        return w / jnp.maximum(norm, tiny), norm

    return jax.lax.cond(norm <= 10 * jnp.finfo(w.dtype).eps * scale, restart, keep, None)


def _bidiagonal(alpha_K, beta_K, num_beta):
    """Upper bidiagonal B with alpha on the diagonal and the first num_beta betas above it."""
    beta_K = jnp.where(jnp.arange(alpha_K.size) < num_beta, beta_K, 0)
    return jnp.diag(alpha_K) + jnp.diag(beta_K[:-1], 1)


def _ritz(alpha_K, beta_K, j):
    """Singular values of the (j+1)-square B built so far, largest first, and row j of its left
    singular vectors.

    From eigh(B B^T): on CPU it costs ~0.4 ms at 62 x 62 against ~50 ms for jnp.linalg.svd, and
    it runs every step. Its top values are accurate to ~eps relative; the returned singular
    values are recomputed once with an SVD after the loop.
    """
    B_KK = _bidiagonal(alpha_K, beta_K, j)  # beta_j couples to the next, not yet built, column
    w_K, P_KK = jnp.linalg.eigh(B_KK @ B_KK.T)  # ascending
    return jnp.sqrt(jnp.maximum(w_K[::-1], 0)), P_KK[j, ::-1]


def lanczos(g, x_N, v0_N, k, max_dim: int, tol, vectors: int = 0):
    """Golub-Kahan-Lanczos bidiagonalization with full reorthogonalization, J V = U B.

    For a Ritz triplet (theta_i, U p_i, V q_i), J V q_i = theta_i U p_i exactly and
    ||J^T U p_i - theta_i V q_i|| = beta_j |P[j, i]|, so some singular value of J lies within that
    residual of theta_i (as in `power_triplet`). Stops when the top-k residuals are <= tol * theta_0,
    or after max_dim steps (static). k may be traced. Returns (all max_dim Ritz values, largest
    first; steps; max relative residual of the top k; #non-finite g(x)), and with `vectors` = K > 0 (static)
    also the top K Ritz pairs (U_KM, V_KN), rows unit vectors, to be checked by `certify`.
    """
    y_M, jvp, vjp = linear_ops(g, x_N)
    V_KN = jnp.zeros((max_dim + 1, x_N.size), x_N.dtype).at[0].set(_unit(v0_N))
    U_KM = jnp.zeros((max_dim, y_M.size), x_N.dtype)
    zeros_K = jnp.zeros((max_dim,), x_N.dtype)

    def body(state):
        j, V_KN, U_KM, alpha_K, beta_K, scale, _ = state
        u_M = jvp(V_KN[j]) - jnp.where(j > 0, beta_K[j - 1], 0) * U_KM[j - 1]
        u_M, a = _orthonormalize(u_M, U_KM, 2 * j + 1, scale)
        scale = jnp.maximum(scale, a)
        v_N = vjp(u_M) - a * V_KN[j]
        v_N, b = _orthonormalize(v_N, V_KN, 2 * j + 2, scale)
        scale = jnp.maximum(scale, b)
        U_KM, V_KN = U_KM.at[j].set(u_M), V_KN.at[j + 1].set(v_N)
        alpha_K, beta_K = alpha_K.at[j].set(a), beta_K.at[j].set(b)
        theta_K, p_K = _ritz(alpha_K, beta_K, j)
        top_K = jnp.arange(max_dim) < k
        rel = jnp.max(jnp.where(top_K, b * jnp.abs(p_K), 0))
        rel = rel / jnp.maximum(theta_K[0], jnp.finfo(x_N.dtype).tiny)
        return j + 1, V_KN, U_KM, alpha_K, beta_K, scale, rel

    def cond(state):
        j, rel = state[0], state[-1]
        return (j < max_dim) & ((j < k) | (rel > tol))

    init = (jnp.int32(0), V_KN, U_KM, zeros_K, zeros_K, jnp.zeros((), x_N.dtype), jnp.asarray(jnp.inf, x_N.dtype))
    j, V_KN, U_KM, alpha_K, beta_K, _, rel = jax.lax.while_loop(cond, body, init)
    B_KK = _bidiagonal(alpha_K, beta_K, j - 1)
    if not vectors:
        return jnp.linalg.svd(B_KK, compute_uv=False), j, rel, checks.count_nonfinite(y_M)
    P_KK, theta_K, Qt_KK = jnp.linalg.svd(B_KK)  # B = P diag(theta) Q^T; rows/columns past j are 0
    U_VM = jax.vmap(_unit)((U_KM.T @ P_KK[:, :vectors]).T)
    V_VN = jax.vmap(_unit)((V_KN[:max_dim].T @ Qt_KK[:vectors].T).T)
    return theta_K, j, rel, checks.count_nonfinite(y_M), (U_VM, V_VN)


def certify(g, x_N, theta_K, U_KM, V_KN, draws: int = ROUNDING_DRAWS):
    """Error bounds of approximate singular triplets (theta_i, u_i, v_i) of the exact-arithmetic Jacobian J of g,
    g's own rounding included; traceable.

    The residuals a = ||J_c v - theta u|| and b = ||J_c^T u - theta v|| are computed directly with the operator
    as g computes it (J_c: its bfloat16 steps included), and each is widened by that matvec's rounding
    rho = max over `draws` Monte Carlo arithmetic draws (`jaxpr_eval.perturbed_eval`: every rounding of g, its
    linearization and transpose perturbed) of the change of J_c v (or J_c^T u). Then some singular value of J
    lies within sqrt(((a + rho_v)^2 + (b + rho_u)^2) / 2) of theta_i (the residual bound for the symmetric
    [[0, J], [J^T, 0]] and (u, v) / sqrt(2)).

    Returns:
      (bound_K, rounding_K): absolute bounds, and their rounding part sqrt((rho_v^2 + rho_u^2) / 2) (the bound
      with zero residuals, so never above it) per triplet.
    """
    out_size = U_KM.shape[1]

    def both(z_N, v_N, u_M):
        _, jvp, vjp = linear_ops(g, z_N)
        return jnp.concatenate([jvp(v_N), vjp(u_M)])

    closed = jax.make_jaxpr(both)(x_N, V_KN[0], U_KM[0])

    def one(theta, u_M, v_N):
        base = both(x_N, v_N, u_M)
        args = [x_N, v_N, u_M]
        spread_DK = jaxpr_eval.perturbed_draws(closed, args, draws, ROUNDOFF) - base
        rho_v = jnp.max(jnp.linalg.norm(spread_DK[:, :out_size], axis=1))
        rho_u = jnp.max(jnp.linalg.norm(spread_DK[:, out_size:], axis=1))
        a = jnp.linalg.norm(base[:out_size] - theta * u_M) + rho_v
        b = jnp.linalg.norm(base[out_size:] - theta * v_N) + rho_u
        return jnp.sqrt((a**2 + b**2) / 2), jnp.sqrt((rho_v**2 + rho_u**2) / 2)

    return jax.vmap(one)(theta_K, U_KM, V_KN)


def hutchinson(g, x_N, z_PN, chunk_size):
    """Hutchinson ||J||_F^2 = E ||J z||^2 over probes z (rows of z_PN, Rademacher).

    Returns (mean, standard error, #non-finite g(x)).
    """
    y_M, jvp, _ = linear_ops(g, x_N)
    num_probes = z_PN.shape[0]
    sq_P = jax.lax.map(lambda z_N: jnp.sum(jvp(z_N) ** 2), z_PN, batch_size=chunk_size)
    stderr = jnp.std(sq_P, ddof=1) / jnp.sqrt(num_probes)
    return jnp.mean(sq_P), stderr, checks.count_nonfinite(y_M)
