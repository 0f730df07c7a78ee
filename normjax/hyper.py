"""Hyper-connections (Zhu et al. 2024), mHC (DeepSeek 2025), mHC-lite (2026): n streams mixed around each branch."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
from flax import nnx, struct

HYPER_KINDS = ("shc", "dhc", "mhc", "mhc_lite")  # static HC, dynamic HC, manifold-constrained HC, mHC-lite
DEFAULT_STREAMS = 4  # n = 4, the expansion rate of both papers' main runs
DEFAULT_SINKHORN_ITERS = 20  # t_max = 20 (mHC; lucidrains sinkhorn_iters, DeepSeek-V4 hc_sinkhorn_iters)
SINKHORN_ORDERS = ("paper", "lucidrains")  # which step of a round comes last: rows (eq. 9) or columns
DYNAMIC_SCALE_INIT = 1e-2  # s_alpha, s_beta (HC) and alpha_pre, alpha_post, alpha_res (mHC, mHC-lite) at init
LITE_OFF_LOGIT = -8.0  # mHC-lite's static logit of every permutation but the identity (FFTYYY/mhc-lite mhc_lite.py 263)


@struct.dataclass
class HyperStreams:
    """The n residual streams of a hyper-connected stack, a pytree: `streams` holds n arrays (B, T, D) or (T, D).

    Not an array on purpose (as `DualStream`): `jnp` functions refuse it, so the streams are never silently
    stacked or taken for one stream. `normjax.jacobian` flattens it stream by stream: a block Jacobian is (nTD, nTD).
    """

    streams: tuple

    @property
    def n(self) -> int:
        return len(self.streams)

    def total(self) -> jax.Array:
        """The sum of the streams: what the stack's read-out (and its final norm) sees."""
        return sum(self.streams[1:], self.streams[0])


def sinkhorn(logits_NN: jax.Array, iters: int, order: str = "paper") -> jax.Array:
    """Sinkhorn-Knopp on H_res (H_res[i, j]: stream j into stream i): exp(logits), then `iters` rounds of two steps.

    order "paper" (Xie et al. 2025 eq. 9, M^(t) = T_r(T_c(M^(t-1))); DeepSeek-V4's `hc_split_sinkhorn` on its
    transposed `comb`): columns divided by their sums, then rows, so the rows sum to 1 exactly after the last step
    (each new stream is a convex combination: forward gain 1) and the columns up to an error that shrinks with
    `iters` (the paper's Fig. 7a: the backward gain deviates slightly). order "lucidrains"
    (`manifold_constrained_hyper_connections.py` lines 49-61, dims -2 then -1 on its transposed alpha): rows first,
    then columns, so the columns are exact and the rows are not. Entries are > 0. The max over the first step's axis
    is subtracted first (a scaling that the first step undoes exactly).
    """
    if order not in SINKHORN_ORDERS:
        raise ValueError(f"sinkhorn order {order!r} is invalid; choose one of {SINKHORN_ORDERS}")
    first, last = (-2, -1) if order == "paper" else (-1, -2)
    m = jnp.exp(logits_NN - jax.lax.stop_gradient(logits_NN.max(first, keepdims=True)))
    for _ in range(iters):
        m = m / m.sum(first, keepdims=True)
        m = m / m.sum(last, keepdims=True)
    return m


def permutation_matrices(n: int) -> jax.Array:
    """The n! permutation matrices (n!, n, n), the identity first: P_r[i, j] = 1 where stream j goes into stream i.

    FFTYYY/mhc-lite `hyper_conn/mhc_lite.py` lines 50-63 (`eye[index]` over `itertools.permutations`, there applied
    as `einsum(alpha, residuals, 'f1 s f2 t, f1 s d -> f2 t d')`, lines 363 and 389: the transpose of each).
    """
    perms = jnp.asarray(list(itertools.permutations(range(n))))
    return jnp.eye(n)[perms].swapaxes(-1, -2)


class HyperConnection(nnx.Module):
    """The mixing matrices of one sublayer: H_pre (n), H_post (n), H_res (n, n), static or per token.

    x_{l+1} = H_res x_l + H_post^T F(H_pre x_l) on the (n, D) streams of each token (H_res[i, j]: stream j into
    stream i). Static part at init (HC's Pre-Norm-like init, Zhu et al. 2024 section 2.3; lucidrains
    `hyper_connections.py` lines 229-247): H_pre = e_{k mod n}, k the sublayer's index in its stack, H_res = I,
    H_post = 1. "dhc" adds s_alpha tanh(N(x) W) (H_pre, H_res) and s_beta tanh(N(x) W_beta) (H_post) per stream,
    W = 0 and s = 1e-2 at init. "mhc" (Xie et al. 2025, eqs. 7-8): with x' = vec(x) / rms(vec(x)) over n D,
    H_pre = sigmoid(alpha_pre x' phi_pre + b_pre), H_post = 2 sigmoid(alpha_post x' phi_post + b_post),
    H_res = Sinkhorn(alpha_res mat(x' phi_res) + b_res); b the static part above, phi = 0 and alpha = 1e-2 at init.
    "mhc_lite" (Yang et al. 2026, arXiv 2601.05732): mHC's H_pre and H_post, x' times a learned gain g (1 at init),
    and H_res = sum_r a_r P_r, a = softmax(alpha_res x' phi_res + b_res) over the n! permutation matrices P_r:
    doubly stochastic exactly. Its static init (FFTYYY/mhc-lite `hyper_conn/mhc_lite.py` lines 261-290):
    b_pre = b_post = 2 e_k - 1 (+1 on stream k, -1 elsewhere), b_res = 0 on the identity, -8 on the others.
    """

    def __init__(
        self,
        kind: str,
        n: int,
        d: int,
        k,
        *,
        make_norm,
        eps: float,
        sinkhorn_iters: int,
        sinkhorn_order: str,
        param_dtype,
    ):
        self.kind, self.n, self.eps, self.iters, self.order = kind, n, eps, sinkhorn_iters, sinkhorn_order
        e_k = jax.nn.one_hot(jnp.asarray(k) % n, n, dtype=param_dtype)  # k traced under nnx.vmap
        lite = kind == "mhc_lite"
        self.pre = nnx.Param(2 * e_k - 1 if lite else e_k)
        self.post = nnx.Param(2 * e_k - 1 if lite else jnp.ones((n,), param_dtype))
        r = len(permutation_matrices(n)) if lite else n * n  # H_res's logits: one per permutation, or per entry
        lite_res = jnp.full((r,), LITE_OFF_LOGIT, param_dtype).at[0].set(0)  # the identity permutation first
        self.res = nnx.Param(lite_res if lite else jnp.eye(n, dtype=param_dtype))
        scale = lambda: nnx.Param(jnp.full((), DYNAMIC_SCALE_INIT, param_dtype))
        zeros = lambda *shape: nnx.Param(jnp.zeros(shape, param_dtype))
        self.norm = make_norm(d) if kind == "dhc" else None
        self.gain = nnx.Param(jnp.ones((n * d,), param_dtype)) if lite else None
        if kind == "dhc":
            self.w_pre, self.w_res, self.w_post = zeros(d), zeros(d, n), zeros(d)
            self.scale_alpha, self.scale_beta = scale(), scale()
        elif kind in ("mhc", "mhc_lite"):
            self.w_pre, self.w_res, self.w_post = zeros(n * d, n), zeros(n * d, r), zeros(n * d, n)
            self.alpha_pre, self.alpha_res, self.alpha_post = scale(), scale(), scale()

    def matrices(self, x_BTND: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """(H_pre (B, T, n), H_post (B, T, n), H_res (B, T, n, n)) for the stacked streams, float32 or wider."""
        ct = jnp.promote_types(x_BTND.dtype, jnp.float32)
        names = ("pre", "res", "post", "w_pre", "w_res", "w_post", "gain")
        mhc = ("alpha_pre", "alpha_res", "alpha_post")
        scales = {"dhc": ("scale_alpha", "scale_beta"), "mhc": mhc, "mhc_lite": mhc}
        names += scales.get(self.kind, ())
        p = {k: getattr(self, k)[...].astype(ct) for k in names if getattr(self, k, None) is not None}
        lead = x_BTND.shape[:-2]
        pre, res, post = (jnp.broadcast_to(p[k], lead + p[k].shape) for k in ("pre", "res", "post"))
        if self.kind == "shc":
            return pre, post, res
        if self.kind == "dhc":
            xbar = self.norm(x_BTND).astype(ct)
            pre = pre + p["scale_alpha"] * jnp.tanh(xbar @ p["w_pre"])
            res = res + p["scale_alpha"] * jnp.tanh(jnp.einsum("...jd,di->...ij", xbar, p["w_res"]))
            return pre, post + p["scale_beta"] * jnp.tanh(xbar @ p["w_post"]), res
        flat = x_BTND.astype(ct).reshape(lead + (-1,))
        flat = flat * jax.lax.rsqrt((flat**2).mean(-1, keepdims=True) + self.eps) * p.get("gain", 1)
        pre = jax.nn.sigmoid(p["alpha_pre"] * (flat @ p["w_pre"]) + pre)
        post = 2 * jax.nn.sigmoid(p["alpha_post"] * (flat @ p["w_post"]) + post)
        logits = p["alpha_res"] * (flat @ p["w_res"]).reshape(res.shape) + res
        if self.kind == "mhc_lite":  # convex weights of the permutations: exactly doubly stochastic
            coeffs = jax.nn.softmax(logits, axis=-1)
            return pre, post, jnp.einsum("...r,rij->...ij", coeffs, permutation_matrices(self.n).astype(ct))
        return pre, post, sinkhorn(logits, self.iters, self.order)


def hyper(s, hs, F, rec, gate):
    """One hyper-connected sublayer: X' = H_res X + H_post^T F(N(H_pre X)) (the branch keeps its Pre-LN norm).

    lucidrains/hyper-connections `hyper_connections.py` lines 315-318 (width connection) and 357-370 (depth
    connection); DeepSeek-V4 inference `model.py` Block.hc_pre / hc_post (attn_norm after hc_pre) for mHC.
    """
    if not isinstance(hs, HyperStreams):
        raise TypeError(
            f"a hyper-connection sublayer maps normjax.HyperStreams (its n residual streams), got {type(hs).__name__}"
        )
    x_BTND = jnp.stack(hs.streams, axis=-2)
    h_pre, h_post, h_res = s.hyper.matrices(x_BTND)
    ct = h_pre.dtype
    h_in = jnp.einsum("...n,...nd->...d", h_pre, x_BTND.astype(ct)).astype(x_BTND.dtype)
    f = F(s.norm(rec("pre", h_in))).astype(ct)
    out = jnp.einsum("...ij,...jd->...id", h_res, x_BTND.astype(ct)) + h_post[..., None] * f[..., None, :]
    out = out.astype(x_BTND.dtype)
    return HyperStreams(tuple(out[..., i, :] for i in range(hs.n)))
