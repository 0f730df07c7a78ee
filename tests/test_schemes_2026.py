"""mHC-lite (Yang et al. 2026, FFTYYY/mhc-lite): init, float64 numpy references of the block and its Jacobian."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from model_fixtures import tiny_model
from test_multistream import _composite_h_res, _params, _randomize_hyper, _streams
from test_schemes import EPS, _attention, _ln, _mlp, _randomize_norms

import normjax
from normjax import hyper

F64 = dict(arch="encoder", param_dtype="float64", dtype="float64")
N = 3  # streams in the reference test: 3! = 6 permutation matrices


def _sigmoid(z):
    return 1 / (1 + np.exp(-z))


def _lite_matrices(X, p, s):
    """(A_m, B, A_r) in Zhu et al.'s orientation (H' = A_r^T H + B^T T(A_m^T H)), from the paper's construction:
    x' = RMSNorm(vec(X)) with gain, A_m = sigmoid(.), B = 2 sigmoid(.), A_r = sum_r softmax(.)_r eye[perm_r]
    (mhc_lite.py lines 345-389: `eye[index]`, mixed as `f1 s f2 t, f1 s d -> f2 t d`)."""
    q = {k.removeprefix(f"{s}/hyper/"): v for k, v in p.items() if k.startswith(f"{s}/hyper/")}
    x = X.reshape(X.shape[:-2] + (-1,))
    x = x / np.sqrt((x**2).mean(-1, keepdims=True) + EPS) * q["gain"]
    a_m = _sigmoid(q["alpha_pre"] * (x @ q["w_pre"]) + q["pre"])
    b = 2 * _sigmoid(q["alpha_post"] * (x @ q["w_post"]) + q["post"])
    z = q["alpha_res"] * (x @ q["w_res"]) + q["res"]
    a = np.exp(z - z.max(-1, keepdims=True))
    a = a / a.sum(-1, keepdims=True)
    perms = np.eye(N)[list(itertools.permutations(range(N)))]
    return a_m, b, np.einsum("...r,rij->...ij", a, perms)


def _lite_block(X, p):  # X (B, T, n, D): attention then FFN, each hyper-connected
    for s, branch in (("attn", _attention), ("ffn", _mlp)):
        a_m, b, a_r = _lite_matrices(X, p, s)
        t = branch(_ln(np.einsum("...n,...nd->...d", a_m, X), p, f"{s}/norm"), p)
        X = np.einsum("...ji,...jd->...id", a_r, X) + b[..., None] * t[..., None, :]
    return X


def _lite_model(num_layers=3, **fields):
    model = tiny_model(num_layers=num_layers, placement="mhc_lite", hyper_streams=N, **F64, **fields)
    _randomize_norms(model)
    _randomize_hyper(model)
    rng = np.random.default_rng(5)
    for _, node in nnx.iter_graph(model):
        if isinstance(node, hyper.HyperConnection):
            node.gain.set_value(jnp.asarray(rng.uniform(0.5, 1.5, node.gain.shape)))
    return model


@pytest.mark.parametrize("l", [0, 2])
def test_mhc_lite_block_and_jacobian_match_the_reference(l, x64):
    model = _lite_model()
    p = _params(model, l)
    X = np.random.default_rng(1).normal(size=(1, 3, N, 16))
    fn = normjax.block_fn(model, l, "encoder")
    np.testing.assert_allclose(np.stack(fn(_streams(X)).streams, axis=-2), _lite_block(X, p), rtol=1e-11, atol=1e-11)
    J = np.asarray(normjax.jacobian.jacobian(fn, _streams(X[0])))
    basis = np.eye(X.size).reshape(X.size, N, 1, 3, 16)
    h = 1e-5
    diff = lambda e: _lite_block(X + h * np.moveaxis(e, 0, -2), p) - _lite_block(X - h * np.moveaxis(e, 0, -2), p)
    J_fd = np.stack([np.moveaxis(diff(e), -2, 0).ravel() / (2 * h) for e in basis], axis=1)  # stream-major
    np.testing.assert_allclose(J, J_fd, rtol=1e-6, atol=1e-7)


def test_mhc_lite_init_is_the_authors():
    """mhc_lite.py lines 261-290: logits of H_pre, H_post +1 on stream k mod n, -1 elsewhere; of H_res 0 on the
    identity and -8 on the n! - 1 other permutations, so H_res's diagonal is (1 + ((n-1)! - 1) e^-8) / Z and every
    other entry (n-1)! e^-8 / Z, Z = 1 + (n! - 1) e^-8; alpha = 0.01, phi = 0, gain 1. Scanned layers: k is traced."""
    model = tiny_model(num_layers=2, placement="mhc_lite", scan_layers=True)
    n = hyper.DEFAULT_STREAMS
    X = jax.random.normal(jax.random.key(0), (2, 3, n, 16))
    z, f = 1 + (math.factorial(n) - 1) * np.exp(-8), math.factorial(n - 1)
    eye = np.where(np.eye(n, dtype=bool), 1 + (f - 1) * np.exp(-8), f * np.exp(-8)) / z
    for l in range(2):
        for i, sub in enumerate(model.stacks["decoder"].block(l).sublayers()):
            pre, post, res = (np.asarray(a[0, 0]) for a in sub.hyper.matrices(X))
            logits = 2 * np.eye(n)[(2 * l + i) % n] - 1
            np.testing.assert_allclose(pre, _sigmoid(logits), rtol=1e-6)
            np.testing.assert_allclose(post, 2 * _sigmoid(logits), rtol=1e-6)
            np.testing.assert_allclose(res, eye, rtol=1e-6)
            assert sub.hyper.alpha_res[...] == np.float32(0.01) and not np.asarray(sub.hyper.w_res[...]).any()
            np.testing.assert_array_equal(sub.hyper.gain[...], 1)


def test_mhc_lite_h_res_is_exactly_doubly_stochastic_where_sinkhorn_is_not(x64):
    """The composite residual map of random H params: every mHC-lite factor's rows and columns sum to 1 within
    float64 rounding, so ||prod H_res||_2 <= 1; mHC's 20 Sinkhorn steps leave its rows off by far more."""
    P, factors = _composite_h_res("mhc_lite", 2.0)
    for res in factors:
        assert (res >= 0).all()
        np.testing.assert_allclose(res.sum(0), 1, atol=1e-14)
        np.testing.assert_allclose(res.sum(1), 1, atol=1e-14)
    assert np.linalg.norm(P, 2) <= 1 + 1e-12
    _, sinkhorn_factors = _composite_h_res("mhc", 2.0)
    assert max(np.abs(res.sum(1) - 1).max() for res in sinkhorn_factors) > 1e-6
