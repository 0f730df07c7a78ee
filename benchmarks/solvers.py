"""Top singular value of real block Jacobians, matrix-free: power vs Lanczos vs LOBPCG vs randomized subspace iteration.

  OPENBLAS_NUM_THREADS=1 python -m benchmarks.solvers --sizes=8x128,32x128,64x256 --eps=1e-3,1e-5

One process, one table. The operator is the Jacobian of one real attention + MLP block (`normjax.block_fn`, Pre-LN
and Post-LN, float32, head_dim 32, d_ff 4d) at the stream entering it, n = T d, linearized once
(`krylov.linear_ops`: J v by a JVP, J^T u by its transpose). A matvec is one J v or one J^T u. Methods:
  power: the project's `krylov.power` (J^T J v per step, 2 matvecs), knob num_iters.
  lanczos: the project's `krylov.lanczos` (Golub-Kahan, full reorthogonalization, Krylov dimension 62 as the
    default k = 1 call; 2 matvecs per step), knob its residual tol.
  lobpcg: `jax.experimental.sparse.linalg.lobpcg_standard` on A = J^T J with block size 1 (it applies A to
    [X, P, R] and to X every iteration: 8 matvecs; 2 more at the start), sigma = sqrt(theta), knob its tol.
  randomized: randomized subspace iteration (Halko, Martinsson and Tropp 2011, Alg. 4.4), block 8, q
    re-orthonormalized power steps, sigma_1 of the small Q^T J: 16 (q + 1) matvecs, knob q.
Each method runs at increasing knob settings (no early stop otherwise); for each accuracy eps the table gives the
cheapest run with |s - sigma_1| / sigma_1 <= eps: its matvecs and wall time (compiled; best of that run and one
more), and both relative to Lanczos. sigma_1: the exact SVD of J where n <= --exact_max_n, else a Lanczos run of
--ref_steps steps (its gap to the exact value is printed where both exist). Times exclude the certificate
(`krylov.certify`) that the host-level `jacobian.spectral_norm` adds to power and Lanczos.
"""

import functools
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags
from flax import nnx
from jax.experimental.sparse.linalg import lobpcg_standard

import normjax
from normjax import jacobian
from normjax.jacobian import exact, krylov

_SIZES = flags.DEFINE_list("sizes", ["8x128", "32x128", "64x256"], "T x d_model per block; n = T * d.")
_PLACEMENTS = flags.DEFINE_list("placements", ["pre", "post"], "Placements to measure.")
_METHODS = flags.DEFINE_list("methods", ["power", "lanczos", "lobpcg", "randomized"], "Methods to compare.")
_EPS = flags.DEFINE_list("eps", ["1e-3", "1e-5"], "Relative accuracies of sigma_1 to reach.")
_EXACT_MAX_N = flags.DEFINE_integer("exact_max_n", 1024, "Reference by dense SVD up to this n, else long Lanczos.")
_REF_STEPS = flags.DEFINE_integer("ref_steps", 150, "Lanczos steps of the reference above --exact_max_n.")

LANCZOS_DIM, LOBPCG_ITERS, BLOCK = 62, 100, 8
KNOBS = {
    "power": [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512],
    "lanczos": [10.0 ** (-e / 4) for e in range(2, 33)],
    "lobpcg": [10.0 ** (-e / 4) for e in range(-8, 53)],  # its test is residual < tol 10 n (theta + |A x|)
    "randomized": [0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48],
}


def block_problem(placement: str, T: int, d: int, head_dim: int = 32):
    """Block 0 of a one-layer float32 encoder and the stream entering it: (f, x_TD, (fn, args, x_N) converted)."""
    cfg = normjax.ModelConfig(
        arch="encoder", vocab_size=256, d_model=d, num_heads=d // head_dim, d_ff=4 * d, num_layers=1,
        placement=placement, max_len=max(T, 8),
    )  # fmt: skip
    model = normjax.Transformer(cfg, rngs=nnx.Rngs(0))
    x_TD = normjax.embed(model, jax.random.randint(jax.random.key(1), (1, T), 0, cfg.vocab_size))[0]
    f = normjax.block_fn(model, 0)
    conv = exact.prepare(f, x_TD)
    return f, x_TD, (conv.fn, conv.args, conv.x_N)


@functools.partial(jax.jit, static_argnums=0)
def _power(fn, args, x_N, v0_N, num_iters):
    s, _, _, steps, _, _ = krylov.power(functools.partial(fn, args), x_N, v0_N, num_iters, 0.0)
    return s, 2 * steps


@functools.partial(jax.jit, static_argnums=(0, 5))
def _lanczos(fn, args, x_N, v0_N, tol, max_dim=LANCZOS_DIM):
    theta_K, steps, _, _ = krylov.lanczos(functools.partial(fn, args), x_N, v0_N, 1, max_dim, tol)
    return theta_K[0], 2 * steps


@functools.partial(jax.jit, static_argnums=0)
def _lobpcg(fn, args, x_N, v0_N, tol):
    _, jvp, vjp = krylov.linear_ops(functools.partial(fn, args), x_N)
    gram = jax.vmap(lambda v: vjp(jvp(v)), in_axes=1, out_axes=1)  # J^T J on (n, k) blocks
    theta_K, _, iters = lobpcg_standard(gram, v0_N[:, None], LOBPCG_ITERS, tol)
    return jnp.sqrt(theta_K[0]), 2 * (1 + 4 * iters)


def randomized_top(jvp, vjp, omega_NB, q):
    """sigma_1 by randomized subspace iteration: Y = J Omega, q times Q = qr(Y), Y = J qr(J^T Q); then sigma_1 of
    Q^T J (Halko-Martinsson-Tropp Alg. 4.4). Returns (sigma_1, matvecs); traceable, q may be traced."""
    mv = jax.vmap(jvp, in_axes=1, out_axes=1)
    mvt = jax.vmap(vjp, in_axes=1, out_axes=1)
    orth = lambda a: jnp.linalg.qr(a)[0]  # noqa: E731
    Y_MB = jax.lax.fori_loop(0, q, lambda _, Y: mv(orth(mvt(orth(Y)))), mv(omega_NB))
    Bt_NB = mvt(orth(Y_MB))  # (Q^T J)^T
    return jnp.linalg.svd(Bt_NB, compute_uv=False)[0], 2 * omega_NB.shape[1] * (q + 1)


@functools.partial(jax.jit, static_argnums=0)
def _randomized(fn, args, x_N, omega_NB, q):
    _, jvp, vjp = krylov.linear_ops(functools.partial(fn, args), x_N)
    return randomized_top(jvp, vjp, omega_NB, q)


def reference(f, x_TD, problem, v0_N) -> tuple[float, str, float | None]:
    """(sigma_1, how, |long Lanczos - exact| / exact where the SVD ran)."""
    long = float(_lanczos(*problem, v0_N, 1e-9, _REF_STEPS.value)[0])
    if x_TD.size > _EXACT_MAX_N.value:
        return long, f"lanczos {_REF_STEPS.value}", None
    J_NN = jacobian.jacobian(f, x_TD)
    s = float(np.linalg.svd(np.asarray(J_NN, np.float64), compute_uv=False)[0])
    return s, "svd", abs(long - s) / s


def timed(run):
    t0 = time.perf_counter()
    s, matvecs = jax.block_until_ready(run())
    return float(s), int(matvecs), time.perf_counter() - t0


def sweep(method: str, fn, args, x_N, start, sigma: float, eps: list[float]) -> dict:
    """{"first_s": compile + first run, eps: (matvecs, seconds) or None} over the method's knobs, cheapest first."""
    runner = {"power": _power, "lanczos": _lanczos, "lobpcg": _lobpcg, "randomized": _randomized}[method]
    out, first = {}, None
    for knob in KNOBS[method]:
        s, matvecs, seconds = timed(lambda k=knob: runner(fn, args, x_N, start, k))
        if first is None:
            first, seconds = seconds, timed(lambda k=knob: runner(fn, args, x_N, start, k))[2]
        err = abs(s - sigma) / sigma
        for e in eps:
            if e not in out and err <= e:
                again = timed(lambda k=knob: runner(fn, args, x_N, start, k))[2]
                out[e] = (matvecs, min(seconds, again))
        if len(out) == len(eps):
            break
    return {"first_s": first, "last_err": err} | {e: out.get(e) for e in eps}


def measure(placement: str, T: int, d: int, eps: list[float]) -> list[dict]:
    f, x_TD, (fn, args, x_N) = block_problem(placement, T, d)
    v0_N = krylov.random_vectors(jax.random.key(0), (x_N.size,), x_N.dtype)
    sigma, how, ref_gap = reference(f, x_TD, (fn, args, x_N), v0_N)
    omega = krylov.random_vectors(jax.random.key(0), (x_N.size, BLOCK), x_N.dtype)
    base = {"placement": placement, "n": x_N.size, "T x d": f"{T}x{d}", "sigma": sigma, "ref": how, "gap": ref_gap}
    return [
        base | {"method": m} | sweep(m, fn, args, x_N, omega if m == "randomized" else v0_N, sigma, eps)
        for m in _METHODS.value
    ]


def table(rows: list[dict], eps: list[float]) -> str:
    """Markdown: per eps the matvecs and seconds, and their ratios to Lanczos on the same problem."""
    head = ["placement", "n", "T x d", "method", "first s"]
    for e in eps:
        head += [f"matvecs {e:g}", f"s {e:g}", f"matvecs / lanczos {e:g}", f"time / lanczos {e:g}"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        lz = next(x for x in rows if x["method"] == "lanczos" and x["n"] == r["n"] and x["placement"] == r["placement"])
        cells = [r["placement"], str(r["n"]), r["T x d"], r["method"], f"{r['first_s']:.1f}"]
        for e in eps:
            if r[e] is None:
                cells += [f"not reached (err {r['last_err']:.1e})", "-", "-", "-"]
                continue
            ratio = lz[e] and (f"{r[e][0] / lz[e][0]:.2f}", f"{r[e][1] / lz[e][1]:.2f}")
            cells += [str(r[e][0]), f"{r[e][1]:.3f}", *(ratio or ("-", "-"))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv):
    del argv
    normjax.keep_freed_memory()
    eps = [float(e) for e in _EPS.value]
    rows, t0 = [], time.perf_counter()
    for size in _SIZES.value:
        T, d = (int(v) for v in size.split("x"))
        for placement in _PLACEMENTS.value:
            new = measure(placement, T, d, eps)
            r = new[0]
            gap = "" if r["gap"] is None else f", long Lanczos vs SVD {r['gap']:.1e}"
            print(
                f"{placement} n={r['n']}: sigma_1 {r['sigma']:.6f} ({r['ref']}{gap}); {time.perf_counter() - t0:.0f} s"
            )
            rows += new
    print(table(rows, eps))


if __name__ == "__main__":
    app.run(main)
