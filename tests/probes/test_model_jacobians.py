"""Jacobians of real blocks of every placement, ReZero's identity, Pre-LN's identity path."""

import jax
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

import normjax
from normjax import jacobian
from normjax.probes import model_jacobians


def stream(model, block, toks):
    """The residual stream entering `block` on the first sequence, (T, D) (ResiDual: the DualStream pair;
    hyper-connections: their n streams)."""
    sp = normjax.probe(model, toks)[1]["decoder"]
    if sp.hyper_streams is not None:
        return normjax.HyperStreams(tuple(s[0] for s in sp.hyper_streams[block]))
    if sp.dual_streams is None:
        return sp.streams[block][0]
    return normjax.DualStream(sp.streams[block][0], sp.dual_streams[block][0])


@pytest.mark.parametrize("placement", normjax.PLACEMENTS)
def test_block_jacobian_fwd_rev_and_finite_differences(placement, helpers):
    # ngpt's MLP is SwiGLU (smooth) and its config refuses the gelu switch it would not read
    model = helpers.model(placement=placement, **({"activation": "relu"} if placement == "ngpt" else {}))
    # Open the zero/small-initialized gates (ReZero, SkipInit, LayerScale) so the branch counts.
    helpers.set_params(model, lambda path, w: w + 0.5 if path.endswith("gate") else w)
    f, x_TD = normjax.block_fn(model, 1), stream(model, 1, helpers.tokens())
    # Eager (disable_jit): twelve placements would otherwise cost two XLA compiles each; the
    # jitted path runs the same code (test_exact.py and the Pre-LN test below).
    with jax.disable_jit():
        J = jacobian.jacobian(f, x_TD)
        np.testing.assert_allclose(jacobian.jacobian(f, x_TD, mode="rev"), J, rtol=1e-10, atol=1e-12)
        x_N, unravel = ravel_pytree(x_TD)  # ResiDual's blocks map a pair of streams, hyper-connections n
        fd = helpers.central_differences(lambda z: ravel_pytree(f(unravel(z)))[0], x_N)
        # J is backpropagation's Jacobian; differences see the map's own (stop_gradient as the identity): the two
        # differ where a stop_gradient changes a derivative (GPAS with alpha != 0), else they agree
        J_map = jacobian.jacobian(f, x_TD, stop_gradient="identity")
        np.testing.assert_allclose(fd, J_map, rtol=1e-7, atol=1e-8)
    if placement.endswith("_gpas"):
        assert np.abs(J - J_map).max() > 1e-2
    else:
        np.testing.assert_allclose(J, J_map, rtol=1e-10, atol=1e-12)
    assert np.abs(J - np.eye(J.shape[0])).max() > 1e-2  # the branch is really there


def test_rezero_is_exactly_the_identity_at_init(helpers):
    # R1 and R2: alpha = 0 makes every block, hence x_0 -> x_L, exactly the identity.
    model = helpers.model(placement="rezero")
    e2e = model_jacobians.end_to_end_jacobians(model, helpers.tokens(), return_io_jacobian=True)
    e2e = e2e["decoder"]
    n = e2e["io_jacobian"].shape[0]
    np.testing.assert_array_equal(e2e["io_jacobian"], np.eye(n))
    np.testing.assert_array_equal(e2e["io_singular_values"], np.ones(n))
    np.testing.assert_array_equal(e2e["spectral"], [1.0, 1.0])
    np.testing.assert_array_equal(e2e["frobenius_sq"], [n, n])


def test_pre_ln_block_is_a_chain_of_identity_plus_branch(helpers):
    model = helpers.model(placement="pre")
    x0 = stream(model, 0, helpers.tokens())
    attn, ffn = (normjax.sublayer_fn(model, 0, s) for s in ("attn", "ffn"))
    J_block = jacobian.jacobian(normjax.block_fn(model, 0), x0)
    J_attn, J_ffn = jacobian.jacobian(attn, x0, mode="rev"), jacobian.jacobian(ffn, attn(x0))
    # Chain rule: d block = d ffn (at x after attention) @ d attn; block_fn = ffn o attn. One
    # Jacobian by jacrev, two by jacfwd: the modes agree on real blocks too.
    np.testing.assert_allclose(J_block, J_ffn @ J_attn, rtol=1e-12, atol=1e-13)
    T, D = x0.shape
    eye = np.eye(T * D)
    for J in (J_attn, J_ffn):
        assert np.linalg.norm(J - eye, 2) > 0.1  # a branch, not a bare identity
        # x + F(LN(x)): LayerNorm removes a constant shift of any token, so the branch does not
        # see it and the shift passes through the identity path unchanged.
        shifts_TDT = np.kron(np.eye(T), np.ones((D, 1)))
        np.testing.assert_allclose(J @ shifts_TDT, shifts_TDT, atol=1e-12)


def test_post_ln_sublayer_output_cannot_move_along_shifts(helpers):
    # The contrast: N(x + F(x)) with gamma = 1, beta = 0 has zero mean per token whatever its
    # input, so no input change moves the output along a constant shift: shifts^T J = 0, and the
    # shift that Pre-LN passes through does not survive.
    model = helpers.model(placement="post")
    x0 = stream(model, 0, helpers.tokens())
    J = jacobian.jacobian(normjax.sublayer_fn(model, 0, "ffn"), x0)
    T, D = x0.shape
    shifts_TDT = np.kron(np.eye(T), np.ones((D, 1)))
    np.testing.assert_allclose(shifts_TDT.T @ J, 0, atol=1e-12)
    assert np.abs(J @ shifts_TDT - shifts_TDT).max() > 0.1


def test_block_probe_encoder_decoder_with_cross_attention(helpers):
    model = helpers.model(placement="post", arch="encoder_decoder", num_layers=1)
    src, tgt = helpers.tokens(length=3), helpers.tokens(length=2, seed=1)
    out = model_jacobians.block_jacobian_norms(model, src, tgt, sequence=1, stacks=("decoder",))
    res = out["decoder"]
    assert set(out) == {"decoder"} and res["methods"] == ["exact"]
    assert set(res) == {"block", "attn", "cross", "ffn", "methods"}
    # J_block is the product of the sublayer Jacobians: submultiplicativity.
    subs = np.prod([res[s] for s in ("attn", "cross", "ffn")], axis=0)
    assert np.all(res["block"] <= subs * (1 + 1e-12)) and np.all(res["block"] > 0)


def test_end_to_end_probe_matrix_free_matches_exact(helpers):
    model = helpers.model(placement="pre", num_layers=1)
    toks = helpers.tokens()
    exact = model_jacobians.end_to_end_jacobians(model, toks)["decoder"]
    free = model_jacobians.end_to_end_jacobians(model, toks, method="lanczos", top_k=4, num_probes=256)["decoder"]
    assert exact["exact"] and not free["exact"]
    assert exact["io_singular_values"].shape == (24,) and free["io_singular_values"].shape == (4,)
    np.testing.assert_allclose(free["spectral"], exact["spectral"], rtol=1e-6)
    np.testing.assert_allclose(free["io_singular_values"], exact["io_singular_values"][:4], rtol=1e-6)
    np.testing.assert_allclose(exact["frobenius_sq"][0], np.sum(exact["io_singular_values"] ** 2))
    # Hutchinson: unbiased, deterministic key; 4 standard errors.
    assert np.all(np.abs(free["frobenius_sq"] - exact["frobenius_sq"]) < 4 * free["frobenius_sq_stderr"])
