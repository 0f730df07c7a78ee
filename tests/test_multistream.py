"""Hyper-connections (static, dynamic) and mHC against float64 numpy references written from the papers' formulas."""

import json
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from model_fixtures import model_inputs, scan_twin, tiny_model
from test_schemes import EPS, _attention, _ln, _mlp, _randomize_norms

import normjax
from normjax import hyper

ROOT = pathlib.Path(__file__).resolve().parents[1]
F64 = dict(arch="encoder", param_dtype="float64", dtype="float64")
N = 3  # streams in the reference tests (n = 3 with 2 sublayers per block: e_{k mod n} visits every stream)
KINDS = ("shc", "dhc", "mhc")


def _sigmoid(z):
    return 1 / (1 + np.exp(-z))


def _sinkhorn_paper(logits, iters, order="paper"):
    """mHC eq. 9: M^(0) = exp(logits), M^(t) = T_r(T_c(M^(t-1))): columns divided by their sums, then rows.
    order "lucidrains": rows first, then columns (its dims -2, -1 on the transposed matrix)."""
    m = np.exp(logits)
    first, last = (-2, -1) if order == "paper" else (-1, -2)
    for _ in range(iters):
        m = m / m.sum(first, keepdims=True)
        m = m / m.sum(last, keepdims=True)
    return m


def _matrices(X, p, s, kind, iters=20):
    """(A_m (B, T, n), B (B, T, n), A_r (B, T, n, n)) in Zhu et al.'s orientation: H' = A_r^T H + B^T T(A_m^T H)."""
    q = {k.removeprefix(f"{s}/hyper/"): v for k, v in p.items() if k.startswith(f"{s}/hyper/")}
    lead = X.shape[:-2]
    a_m, a_r, b = (np.broadcast_to(v, lead + v.shape) for v in (q["pre"], q["res"].swapaxes(0, 1), q["post"]))
    if kind == "dhc":  # Zhu et al. eqs. (11)-(13): H_bar = norm(H); s tanh(H_bar W) + static
        Hb = _ln(X, p, f"{s}/hyper/norm")
        a_m = a_m + q["scale_alpha"] * np.tanh(Hb @ q["w_pre"])
        a_r = a_r + q["scale_alpha"] * np.tanh(Hb @ q["w_res"])
        b = b + q["scale_beta"] * np.tanh(Hb @ q["w_post"])
    if kind == "mhc":  # Xie et al. eqs. (7)-(8) on x' = RMSNorm(vec(x))
        x = X.reshape(lead + (-1,))
        x = x / np.sqrt((x**2).mean(-1, keepdims=True) + EPS)
        a_m = _sigmoid(q["alpha_pre"] * (x @ q["w_pre"]) + q["pre"])
        b = 2 * _sigmoid(q["alpha_post"] * (x @ q["w_post"]) + q["post"])
        logits = q["alpha_res"] * (x @ q["w_res"]).reshape(lead + (N, N)) + q["res"]
        a_r = _sinkhorn_paper(logits, iters).swapaxes(-1, -2)
    return a_m, b, a_r


def _hc_sublayer(X, p, s, kind, branch):
    a_m, b, a_r = _matrices(X, p, s, kind)
    h = np.einsum("...n,...nd->...d", a_m, X)
    t = branch(_ln(h, p, f"{s}/norm"), p)
    return np.einsum("...ji,...jd->...id", a_r, X) + b[..., None] * t[..., None, :]


def _hc_block(X, p, kind):  # X (B, T, n, D): attention then FFN, each hyper-connected
    return _hc_sublayer(_hc_sublayer(X, p, "attn", kind, _attention), p, "ffn", kind, _mlp)


def _randomize_hyper(model, seed=0, scale=0.4):
    """Random static and dynamic H parameters (and visible scales), so the reference sees every term."""
    rng = np.random.default_rng(seed)
    for _, node in nnx.iter_graph(model):
        if isinstance(node, hyper.HyperConnection):
            for name in ("pre", "res", "post", "w_pre", "w_res", "w_post"):
                if hasattr(node, name):
                    v = getattr(node, name)
                    v.set_value(v[...] + jnp.asarray(rng.normal(0, scale, v.shape), v.dtype))
            for name in ("scale_alpha", "scale_beta", "alpha_pre", "alpha_res", "alpha_post"):
                if hasattr(node, name):
                    getattr(node, name).set_value(jnp.asarray(rng.uniform(0.3, 0.8), getattr(node, name)[...].dtype))


def _params(model, l):
    return {k: np.asarray(v) for k, v in normjax.layer_params(nnx.state(model, nnx.Param), model, "encoder")[l].items()}


def _streams(X):  # (..., n, D) numpy -> HyperStreams
    return normjax.HyperStreams(tuple(jnp.asarray(X[..., i, :]) for i in range(X.shape[-2])))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("l", [0, 2])
def test_block_forward_and_jacobian_match_the_papers_formula(kind, l, x64):
    model = tiny_model(num_layers=3, placement=kind, hyper_streams=N, **F64)
    _randomize_norms(model)
    _randomize_hyper(model)
    p = _params(model, l)
    X = np.random.default_rng(1).normal(size=(1, 3, N, 16))
    fn = normjax.block_fn(model, l, "encoder")
    got = np.stack(fn(_streams(X)).streams, axis=-2)
    np.testing.assert_allclose(got, _hc_block(X, p, kind), rtol=1e-11, atol=1e-11)
    # (nTD, nTD), stream-major rows and columns, against central differences of the reference
    J = np.asarray(normjax.jacobian.jacobian(fn, _streams(X[0])))
    n = X.size
    assert J.shape == (n, n)
    to_streams = lambda Y: np.moveaxis(Y, -2, 0).ravel()  # (1, T, n, D) -> stream-major vector
    basis = np.eye(n).reshape(n, N, 1, 3, 16)
    h = 1e-5
    step = lambda e, sign: _hc_block(X + sign * h * np.moveaxis(e, 0, -2), p, kind)
    diff = lambda e: step(e, 1) - step(e, -1)
    J_fd = np.stack([to_streams(diff(e)) / (2 * h) for e in basis], axis=1)
    np.testing.assert_allclose(J, J_fd, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("scan_layers", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_init_is_the_papers(kind, scan_layers):
    """H_pre = e_{k mod n} (k the sublayer's index in its stack), H_res = I, H_post = 1 before mHC's maps."""
    model = tiny_model(arch="encoder_decoder", num_layers=2, placement=kind, scan_layers=scan_layers)
    n = hyper.DEFAULT_STREAMS
    X = jax.random.normal(jax.random.key(0), (2, 3, n, 16))
    for stack, per_block in (("encoder", 2), ("decoder", 3)):
        for l in range(2):
            for i, sub in enumerate(model.stacks[stack].block(l).sublayers()):
                pre, post, res = (np.asarray(a[0, 0]) for a in sub.hyper.matrices(X))
                e = np.eye(n)[(l * per_block + i) % n]
                if kind == "mhc":  # sigmoid(e_k), 2 sigmoid(1), Sinkhorn(I): at init the dynamic terms are 0
                    e, ones, eye = _sigmoid(e), 2 * _sigmoid(np.ones(n)), _sinkhorn_paper(np.eye(n), 20)
                else:
                    ones, eye = np.ones(n), np.eye(n)
                np.testing.assert_allclose(pre, e, rtol=1e-6)
                np.testing.assert_allclose(post, ones, rtol=1e-6)
                np.testing.assert_allclose(res, eye, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("order, exact_axis", [("paper", -1), ("lucidrains", -2)])
def test_sinkhorn_is_doubly_stochastic_within_tolerance(order, exact_axis, x64):
    """Entries > 0; the sums of the last step's axis exact (rows in the paper's order, eq. 9: each new stream a
    convex combination; columns in lucidrains'), the other axis closer with every iteration (the l1 marginal error
    of Sinkhorn-Knopp never grows); converged at 500 iterations. At t_max = 20 the inexact sums of peaked logits
    still miss 1 by up to about 1% (std 2 here), the gap mHC-lite (arXiv 2601.05732) points out."""
    logits = jnp.asarray(np.random.default_rng(0).normal(0, 2.0, (64, 4, 4)))
    other = -3 - exact_axis
    errors = []
    for iters in (1, 5, 20, 100, 500):
        m = np.asarray(hyper.sinkhorn(logits, iters, order))
        assert (m > 0).all()
        np.testing.assert_allclose(m.sum(exact_axis), 1, atol=1e-14)
        np.testing.assert_allclose(m, _sinkhorn_paper(np.asarray(logits), iters, order), rtol=1e-12)  # max shift
        errors.append(np.abs(m.sum(other) - 1).sum(-1).max())
    assert errors[2] > 1e-3, errors  # 20 iterations leave a gap on the other axis
    assert all(b <= a for a, b in zip(errors, errors[1:], strict=False)) and errors[-1] < 1e-12, errors


def test_sinkhorn_orders_differ_and_refuse_an_unknown_one():
    logits = jnp.asarray(np.random.default_rng(1).normal(0, 2.0, (4, 4)))
    paper, lucid = (np.asarray(hyper.sinkhorn(logits, 5, order)) for order in hyper.SINKHORN_ORDERS)
    assert np.abs(paper - lucid).max() > 1e-4  # 5 rounds: not yet converged, so the last step shows
    with pytest.raises(ValueError, match="sinkhorn order 'rows' is invalid"):
        hyper.sinkhorn(logits, 20, "rows")


def _composite_h_res(kind, scale, depth=8, **fields):
    """prod over every sublayer of H_res at the streams it sees (first token), and the factors; H params randomised."""
    model = tiny_model(num_layers=depth, placement=kind, **F64, **fields)
    _randomize_hyper(model, 0, scale)
    st = model.stacks["encoder"]
    inputs = model_inputs(model.cfg)
    ctx = normjax.block_context(model, *inputs, stack="encoder")
    x = st.initial_state(normjax.embed(model, inputs[0], "encoder"))
    P, factors = np.eye(hyper.DEFAULT_STREAMS), []
    for l in range(depth):
        block = st.block(l)
        for sub in block.sublayers():
            res = np.asarray(sub.hyper.matrices(jnp.stack(x.streams, axis=-2))[2][0, 0])
            P, x = res @ P, block.apply_sublayer(sub, x, ctx, {})
            factors.append(res)
    return P, factors


@pytest.mark.parametrize("order, exact", [(None, 1), ("paper", 1), ("lucidrains", 0)])
def test_mhc_model_follows_its_sinkhorn_order(order, exact, x64):
    """The model's H_res: the sums the order normalises last are exact (rows by default, eq. 9), the others not."""
    _, factors = _composite_h_res("mhc", 2.0, depth=2, sinkhorn_order=order)
    assert max(np.abs(res.sum(exact) - 1).max() for res in factors) < 1e-13
    assert max(np.abs(res.sum(1 - exact) - 1).max() for res in factors) > 1e-6


@pytest.mark.parametrize("iters", [20, 500])
def test_mhc_composite_residual_map_has_spectral_norm_at_most_one(iters, x64):
    """||prod H_res||_2 <= sqrt(||P||_1 ||P||_inf) <= prod_k sqrt(max col sum_k max row sum_k) (non-negative
    factors, induced norms submultiplicative): 1 for doubly stochastic factors (Xie et al. section 4.1), and 1 up
    to the Sinkhorn gap of finitely many iterations."""
    P, factors = _composite_h_res("mhc", 0.4, sinkhorn_iters=iters)
    assert all((res > 0).all() for res in factors)
    bound = np.prod([np.sqrt(res.sum(0).max() * res.sum(1).max()) for res in factors])
    assert np.linalg.norm(P, 2) <= np.sqrt(P.sum(0).max() * P.sum(1).max()) * (1 + 1e-12) <= bound * (1 + 1e-11)
    if iters == 500:  # converged: doubly stochastic within float64 rounding
        assert bound <= 1 + 1e-10 and np.linalg.norm(P, 2) <= 1 + 1e-10
    # unconstrained static HC with the same random draw: the composite map amplifies
    P_hc, _ = _composite_h_res("shc", 0.4)
    assert np.linalg.norm(P_hc, 2) > 1.5


@pytest.mark.parametrize("kind", ["shc", "dhc"])
@pytest.mark.parametrize("arch", ["decoder", "encoder_decoder"])
def test_one_stream_hc_at_init_is_pre_ln(kind, arch, x64):
    """n = 1, H_pre = H_res = H_post = 1 (Zhu et al.: Pre-Norm is the special case): the same model as Pre-LN."""
    fields = dict(arch=arch, num_layers=3, param_dtype="float64", dtype="float64")
    pre, hc = tiny_model(placement="pre", **fields), tiny_model(placement=kind, hyper_streams=1, **fields)
    inputs = model_inputs(pre.cfg)
    np.testing.assert_allclose(hc(*inputs), pre(*inputs), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
def test_probes_stack_fn_and_scan_agree(kind, x64):
    model = tiny_model(num_layers=3, placement=kind, hyper_streams=2, param_dtype="float64", dtype="float64")
    _randomize_hyper(model)
    inputs = model_inputs(model.cfg)
    logits, probes = normjax.probe(model, *inputs)
    sp = probes["decoder"]
    assert sp.hyper_streams[0].shape == (2, 2, 5, 16) and sp.dual_streams is None
    np.testing.assert_array_equal(sp.hyper_streams[0][0], sp.hyper_streams[0][1])  # n copies of x_0
    for total, streams in zip(sp.streams, sp.hyper_streams, strict=True):
        np.testing.assert_allclose(total, streams.sum(0), rtol=1e-12)
    np.testing.assert_allclose(sp.final_norm_input, sp.streams[-1], rtol=1e-12)
    last = normjax.stack_fn(model)(normjax.HyperStreams(tuple(sp.hyper_streams[0])))
    np.testing.assert_allclose(jnp.stack(last.streams), sp.hyper_streams[-1], rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(scan_twin(model)(*inputs), logits, rtol=1e-11, atol=1e-11)
    x0 = normjax.embed(model, inputs[0])
    np.testing.assert_allclose(normjax.probe_stream(model, x0).streams[-1], sp.streams[-1], rtol=1e-11)


def test_multi_stream_state_is_never_probed_as_one_stream():
    model = tiny_model(placement="mhc", hyper_streams=2)
    x = jax.random.normal(jax.random.key(0), (5, 16))
    for fn in (normjax.block_fn(model, 0), normjax.sublayer_fn(model, 0, "ffn"), normjax.stack_fn(model)):
        with pytest.raises(TypeError, match="hyper-connected.*HyperStreams of 2"):
            fn(x)
        with pytest.raises(TypeError, match="HyperStreams of 2 streams, got HyperStreams of 3"):
            fn(normjax.HyperStreams((x, x, x)))
    with pytest.raises(TypeError, match="one stream"):
        normjax.block_fn(tiny_model(placement="pre"), 0)(normjax.HyperStreams((x, x)))
    with pytest.raises(TypeError):  # no array: jnp does not silently stack the streams
        jnp.asarray(normjax.HyperStreams((x, x)))


def test_config_refusals():
    with pytest.raises(ValueError, match="mixes stream kinds .mhc carries 'hyper', pre carries 'one'"):
        normjax.ModelConfig(num_layers=2, placement=("mhc", "pre"))
    with pytest.raises(ValueError, match="hyper_streams=2 is invalid: is read only by placements shc, dhc, mhc"):
        normjax.ModelConfig(placement="pre", hyper_streams=2)
    with pytest.raises(ValueError, match="sinkhorn_iters=5 is invalid: is read only by placements mhc"):
        normjax.ModelConfig(placement="dhc", sinkhorn_iters=5)
    with pytest.raises(ValueError, match="sinkhorn_order='lucidrains' is invalid: is read only by placements mhc"):
        normjax.ModelConfig(placement="dhc", sinkhorn_order="lucidrains")
    with pytest.raises(ValueError, match="sinkhorn_order='rows' is invalid: valid choices are 'paper', 'lucidrains'"):
        normjax.ModelConfig(placement="mhc", sinkhorn_order="rows")
    for name in ("hyper_streams", "sinkhorn_iters"):
        with pytest.raises(ValueError, match=f"{name}=0 is invalid: must be a positive integer"):
            normjax.ModelConfig(placement="mhc", **{name: 0})
    cfg = normjax.ModelConfig(placement=("shc", "mhc"), num_layers=2, sinkhorn_iters=3)  # kinds may mix per layer
    assert cfg.num_streams("decoder") == 4 and cfg.num_sinkhorn_iters == 3


@pytest.mark.parametrize("scan_layers", [False, True])
@pytest.mark.parametrize("arch", ["decoder", "encoder", "encoder_decoder"])
@pytest.mark.parametrize("kind", KINDS)
def test_builds_and_differentiates_in_every_arch(kind, arch, scan_layers):
    model = tiny_model(arch=arch, placement=kind, scan_layers=scan_layers)
    inputs = model_inputs(model.cfg)
    assert np.isfinite(model(*inputs)).all()

    def loss(m):
        return m(*inputs).mean()

    grads = nnx.grad(loss)(model)
    assert all(np.isfinite(g).all() for g in jax.tree.leaves(grads))


def test_mhc_trains_in_the_quick_preset(tmp_path):
    """Three steps of `experiments.train --config=:quick` with mHC (2 streams, 5 Sinkhorn iterations)."""
    command = [sys.executable, "-m", "experiments.train", "--config=:quick", f"--workdir={tmp_path}"]
    command += ["--progress=false", "--config.model.placement=mhc", "--config.model.hyper_streams=2"]
    command += ["--config.model.sinkhorn_iters=5"]
    command += ["--config.train.num_steps=3", "--config.train.warmup_steps=0", "--config.train.diag_every=0"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["steps"] == 3 and summary["diverged_step"] is None and np.isfinite(summary["best_valid_nll"])
