"""mHC-lite (Yang et al. 2026) and SiameseNorm (Li et al. 2026): init, float64 numpy references, Jacobians."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from model_fixtures import model_inputs, scan_twin, tiny_model
from test_multistream import _composite_h_res, _params, _randomize_hyper, _streams
from test_schemes import EPS, _attention, _ln, _mlp, _np_params, _randomize_norms

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
    float64 rounding, so ||prod H_res||_2 <= 1; mHC's 20 Sinkhorn steps leave its columns off by far more (the rows
    are normalised last, eq. 9)."""
    P, factors = _composite_h_res("mhc_lite", 2.0)
    for res in factors:
        assert (res >= 0).all()
        np.testing.assert_allclose(res.sum(0), 1, atol=1e-14)
        np.testing.assert_allclose(res.sum(1), 1, atol=1e-14)
    assert np.linalg.norm(P, 2) <= 1 + 1e-12
    _, sinkhorn_factors = _composite_h_res("mhc", 2.0)
    assert max(np.abs(res.sum(0) - 1).max() for res in sinkhorn_factors) > 1e-6


def _siamese_block(x, d, p, l):
    """deit-model-siamesenorm.py lines 216-226 (l from 0): x = N_x(x); u = N(x + N_d(d)); f = F(u);
    x = x + f / sqrt(2 (l + 1)); d = d + f, per sublayer; N_x, N_d, N are the sublayer's norm2, norm3, norm."""
    for s, branch in (("attn", _attention), ("ffn", _mlp)):
        x = _ln(x, p, f"{s}/norm2")
        f = branch(_ln(x + _ln(d, p, f"{s}/norm3"), p, f"{s}/norm"), p)
        x, d = x + f / np.sqrt(2 * (l + 1)), d + f
    return x, d


def _siamese_model(scan_layers=False):
    model = tiny_model(placement="siamese", num_layers=3, **F64)
    _randomize_norms(model)
    return scan_twin(model) if scan_layers else model


@pytest.mark.parametrize("scan_layers", [False, True])
def test_siamese_model_matches_the_authors_forward(scan_layers, x64):
    """x_0 = d_0 = embeddings (deit line 352: y = x.clone()); every block as above; output
    N_f(N_a(x_L) + N_b(d_L)) (line 355-356: final_norm(pre_norm(x) + post_norm(y))) before the tied head."""
    model = _siamese_model(scan_layers)
    tokens = model_inputs(model.cfg)[0]
    x = d = np.asarray(normjax.embed(model, tokens, "encoder"))
    for l, p in enumerate(_np_params(model, "encoder")):
        x, d = _siamese_block(x, d, p, l)
    st = model.stacks["encoder"]
    norm_params = lambda m: {"n/scale": np.asarray(m.scale[...]), "n/bias": np.asarray(m.bias[...])}
    z = _ln(x, norm_params(st.stream_norms[0]), "n") + _ln(d, norm_params(st.stream_norms[1]), "n")
    out = _ln(z, norm_params(st.final_norm), "n")
    logits, probes = normjax.probe(model, tokens)
    table = np.asarray(model.embedders["encoder"].table.embedding[...])
    np.testing.assert_allclose(logits, out @ table.T, rtol=1e-11, atol=1e-11)
    sp = probes["encoder"]
    np.testing.assert_array_equal(sp.streams[0], sp.dual_streams[0])
    np.testing.assert_allclose(sp.streams[-1], x, rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(sp.dual_streams[-1], d, rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(sp.final_norm_input, z, rtol=1e-11, atol=1e-11)


def test_siamese_block_jacobian_matches_the_reference(x64):
    """The (x, d) -> (x', d') Jacobian of block 2 (scale 1/sqrt(6)) against central differences of the reference."""
    model = _siamese_model()
    p = _np_params(model, "encoder")[2]
    x, d = np.random.default_rng(1).normal(size=(2, 3, 16))
    fn = normjax.block_fn(model, 2, "encoder")
    J = np.asarray(normjax.jacobian.jacobian(fn, normjax.DualStream(jnp.asarray(x), jnp.asarray(d))))
    xd, h = np.concatenate([x.ravel(), d.ravel()]), 1e-5
    ref = lambda v: np.concatenate([a.ravel() for a in _siamese_block(*v.reshape(2, 1, 3, 16), p, 2)])
    J_fd = np.stack([(ref(xd + h * e) - ref(xd - h * e)) / (2 * h) for e in np.eye(xd.size)], axis=1)
    np.testing.assert_allclose(J, J_fd, rtol=1e-6, atol=1e-7)
    n = x.size  # the streams are coupled through every branch: d'/d = I + dF/dd, x'/d != 0
    assert np.abs(J[n:, n:] - np.eye(n)).max() > 0.01 and np.abs(J[:n, n:]).max() > 0.01


def test_siamese_init_three_norms_per_sublayer_two_on_the_read_out_and_the_depth_scale():
    """deit lines 204-211 and 285-287: post_norm, pre_norm, input_norm per sublayer, two norms before the final one,
    all at unit gain; c = sqrt(2 (index + 1)) with index the block's; base init otherwise. Scanned: l is traced."""
    model = tiny_model(arch="encoder_decoder", num_layers=2, placement="siamese", scan_layers=True)
    for stack in model.cfg.stacks:
        st = model.stacks[stack]
        for m in (*st.stream_norms, st.final_norm):
            np.testing.assert_array_equal(m.scale[...], 1)
        for l in range(2):
            for sub in st.block(l).sublayers():
                for m in (sub.norm, sub.norm2, sub.norm3):
                    np.testing.assert_array_equal(m.scale[...], 1)
                assert float(sub.lns_scale[...]) * 2**-0.5 == pytest.approx(1 / np.sqrt(2 * (l + 1)), rel=1e-7)
    with pytest.raises(ValueError, match="mixes resi_dual's and siamese's read-outs"):
        normjax.ModelConfig(num_layers=2, placement=("siamese", "resi_dual"))
    with pytest.raises(ValueError, match="final_norm=False"):
        normjax.ModelConfig(placement="siamese", final_norm=False)
