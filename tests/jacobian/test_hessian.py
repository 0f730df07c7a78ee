"""Hessian-vector products and the preconditioned sharpness against the explicit Hessian of a tiny model (float64)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.flatten_util import ravel_pytree

import normjax
from normjax.jacobian import hessian

SIZES = dict(vocab_size=5, d_model=4, num_heads=1, d_ff=8, num_layers=1, max_len=4, placement="post")


def _tiny_loss():
    """(loss(params, tokens), params, tokens): a 1-layer float64 Post-LN byte LM's next-token nll."""
    cfg = normjax.ModelConfig(arch="decoder", dtype="float64", param_dtype="float64", activation="gelu", **SIZES)
    graphdef, params, consts = nnx.split(normjax.Transformer(cfg, rngs=nnx.Rngs(0)), nnx.Param, ...)
    tokens = jnp.array([[1, 3, 0, 4], [2, 2, 1, 0]])

    def loss(p, tokens):
        logits = nnx.merge(graphdef, p, consts)(tokens[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

    return loss, params, tokens


def _explicit(loss, params, tokens):
    """(H_NN by jax.hessian on the flattened params, flat params, unravel)."""
    x_N, unravel = ravel_pytree(params)
    H_NN = jax.jit(jax.hessian(lambda x: loss(unravel(x), tokens)))(x_N)  # jitted: 1.9 s, eagerly 12.6 s
    return H_NN, x_N, unravel


def test_hvp_equals_explicit_hessian_times_vector():
    loss, params, tokens = _tiny_loss()
    H_NN, x_N, unravel = _explicit(loss, params, tokens)
    v_N = jnp.asarray(np.random.default_rng(0).standard_normal(x_N.size))
    Hv_N = ravel_pytree(jax.jit(hessian.hvp, static_argnums=0)(loss, params, unravel(v_N), tokens))[0]  # as used
    np.testing.assert_allclose(Hv_N, H_NN @ v_N, rtol=1e-10, atol=1e-12)


def test_sharpness_equals_top_eigenvalue_of_explicit_hessian():
    loss, params, tokens = _tiny_loss()
    H_NN, x_N, _ = _explicit(loss, params, tokens)
    top = hessian.top_eigenvalue(loss, params, tokens, max_dim=x_N.size, tol=1e-12)
    eig = np.linalg.eigvalsh(np.asarray(H_NN))
    np.testing.assert_allclose(float(top.magnitude), np.abs(eig).max(), rtol=1e-9)
    np.testing.assert_allclose(float(top.value), eig.max(), rtol=1e-8)


def test_preconditioned_sharpness_equals_explicit_p_inverse_h():
    """The top eigenvalue of P^-1 H, P = diag(sqrt(nu_hat) + eps) from a real Adam state after 3 updates."""
    loss, params, tokens = _tiny_loss()
    H_NN, x_N, unravel = _explicit(loss, params, tokens)
    adam = optax.scale_by_adam(b1=0.9, b2=0.95, eps=1e-8)
    state, p = adam.init(params), params
    grad = jax.jit(jax.grad(loss))
    for _ in range(3):
        g = grad(p, tokens)
        u, state = adam.update(g, state, p)
        p = jax.tree.map(lambda a, b: a - 1e-2 * b, p, u)
    precond = hessian.adam_preconditioner(state.nu, state.count, 0.95, 1e-8)
    H_NN, x_N, _ = _explicit(loss, p, tokens)
    P_N = ravel_pytree(precond)[0]
    nu_hat_N = ravel_pytree(state.nu)[0] / (1 - 0.95**3)
    np.testing.assert_allclose(P_N, np.sqrt(nu_hat_N) + 1e-8, rtol=1e-12)
    eig = np.linalg.eigvals(np.asarray(H_NN) / np.asarray(P_N)[:, None]).real  # P^-1 H (not symmetric)
    top = hessian.top_eigenvalue(loss, p, tokens, precond=precond, max_dim=x_N.size, tol=1e-12)
    np.testing.assert_allclose(float(top.magnitude), np.abs(eig).max(), rtol=1e-7)
    np.testing.assert_allclose(float(top.value), eig.max(), rtol=1e-6)


def test_largest_eigenvalue_when_a_negative_one_dominates():
    """A quadratic with eigenvalues (-5, 0.5, 2) in a rotated basis, preconditioned by P = diag(1, 2, 4)."""
    rotation, _ = np.linalg.qr(np.random.default_rng(1).standard_normal((3, 3)))
    A = jnp.asarray(rotation @ np.diag([-5.0, 0.5, 2.0]) @ rotation.T)
    P = jnp.array([1.0, 2.0, 4.0])

    def loss(p):
        return 0.5 * p["w"] @ A @ p["w"]

    top = hessian.top_eigenvalue(loss, {"w": jnp.ones(3)}, precond={"w": P}, max_dim=3, tol=1e-12)
    eig = np.linalg.eigvalsh(np.asarray(A) / np.sqrt(np.outer(P, P)))  # D^-1/2 A D^-1/2
    assert eig.min() < 0 < eig.max() < -eig.min()
    np.testing.assert_allclose(float(top.magnitude), -eig.min(), rtol=1e-10)
    np.testing.assert_allclose(float(top.value), eig.max(), rtol=1e-9)


def test_adam_threshold_is_gradient_descents_without_momentum():
    assert hessian.adam_threshold(0.1, 0.0) == 2.0 / 0.1
    np.testing.assert_allclose(hessian.adam_threshold(1e-3, 0.9), 38.0 / 1e-3)
