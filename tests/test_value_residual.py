"""The speedrun's value residual and x0-skip lambdas against a float64 jax reference written from their formulas."""

import json
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.flatten_util import ravel_pytree
from model_fixtures import TINY, model_inputs, scan_twin, tiny_model
from test_schemes import EPS, H, _randomize_norms

import normjax
from normjax import specs
from normjax.skips import SkipStream

ROOT = pathlib.Path(__file__).resolve().parents[1]
F64 = dict(arch="encoder", param_dtype="float64", dtype="float64", num_layers=3)
OPTIONS = [dict(value_residual=True), dict(x0_lambdas=True), dict(value_residual=True, x0_lambdas=True)]


def _ln(z, p, prefix):
    c = z - z.mean(-1, keepdims=True)
    return c / jnp.sqrt((c**2).mean(-1, keepdims=True) + EPS) * p[f"{prefix}/scale"] + p[f"{prefix}/bias"]


def _lin(x, p, name):
    return x @ p[f"{name}/kernel"] + p[f"{name}/bias"]


def _reference_block(state, p, l):
    """Pre-LN block from the formulas: x = a x + c x0; v = (1 - lam) v + lam v_1 (v_1 = v in block 0)."""
    x, x0, v1 = state
    if x0 is not None:
        a, c = p["x0_lambdas"]
        x = a * x + c * x0
    h = _ln(x, p, "attn/norm")
    B, T, D = h.shape
    q, k, v = (_lin(h, p, f"attn/{n}") for n in ("query", "key", "value"))
    if v1 is not None:
        v1 = v if l == 0 else v1
        v = (1 - p["value_lambda"]) * v + p["value_lambda"] * v1
    q, k, v = (z.reshape(B, T, H, D // H).transpose(0, 2, 1, 3) for z in (q, k, v))
    w = jax.nn.softmax(q @ k.transpose(0, 1, 3, 2) / np.sqrt(D // H), axis=-1)
    x = x + _lin((w @ v).transpose(0, 2, 1, 3).reshape(B, T, D), p, "attn/out")
    x = x + _lin(jax.nn.relu(_lin(_ln(x, p, "ffn/norm"), p, "ffn/fc1")), p, "ffn/fc2")
    return x, x0, v1


def _params(model, l):
    params = normjax.layer_params(nnx.state(model, nnx.Param), model, "encoder")[l]
    return {k: jnp.asarray(v) for k, v in params.items()}


def _set_lambdas(model, lam=None, a=None, c=None):
    """Every block's lam_l and / or (a_l, c_l) (where the model has them), one value per block."""
    for l in range(model.cfg.num_layers):
        block = model.stacks["encoder"].layers[l]
        if lam is not None and block.value_lambda is not None:
            block.value_lambda.set_value(jnp.asarray(lam[l], block.value_lambda.dtype))
        if a is not None and block.x0_lambdas is not None:
            block.x0_lambdas.set_value(jnp.asarray([a[l], c[l]], block.x0_lambdas.dtype))


def _model(seed=0, **fields):
    model = tiny_model(seed, **F64, **fields)
    _randomize_norms(model)
    return model


def _reference_logits(model, tokens):
    x = normjax.embed(model, tokens, "encoder")
    cfg = model.cfg
    state = (x, x if cfg.x0_lambdas else None, jnp.zeros_like(x) if cfg.value_residual else None)
    for l in range(cfg.num_layers):
        state = _reference_block(state, _params(model, l), l)
    return model.logits(model.stacks["encoder"].final_norm(state[0]))


@pytest.mark.parametrize("scan_layers", [False, True])
@pytest.mark.parametrize("fields", OPTIONS)
def test_forward_matches_the_formulas_with_non_trivial_lambdas(fields, scan_layers, x64):
    model = _model(**fields)
    _set_lambdas(model, lam=[0.9, 0.3, -0.4], a=[0.7, 1.2, 0.5], c=[0.4, -0.6, 0.8])
    tokens = model_inputs(model.cfg)[0]
    expected = _reference_logits(model, tokens)
    run = scan_twin(model) if scan_layers else model
    np.testing.assert_allclose(np.asarray(run(tokens)), np.asarray(expected), rtol=1e-11, atol=1e-11)


def test_neutral_lambdas_give_the_plain_model_and_non_trivial_ones_change_it(x64):
    plain = _model()
    tokens = model_inputs(plain.cfg)[0]
    want = np.asarray(plain(tokens))
    x0 = _model(x0_lambdas=True)  # a = 1, c = 0 at init
    np.testing.assert_allclose(np.asarray(x0(tokens)), want, rtol=1e-13, atol=1e-13)
    vr = _model(value_residual=True)
    _set_lambdas(vr, lam=[0.0, 0.0, 0.0])
    np.testing.assert_allclose(np.asarray(vr(tokens)), want, rtol=1e-13, atol=1e-13)
    # lam changes nothing in block 0 (v_1 = its own v), and changes blocks 1.. as the formula says
    _set_lambdas(vr, lam=[0.8, 0.0, 0.0])
    np.testing.assert_allclose(np.asarray(vr(tokens)), want, rtol=1e-13, atol=1e-13)
    _set_lambdas(vr, lam=[0.0, 0.5, 0.0])
    assert not np.allclose(np.asarray(vr(tokens)), want)
    _set_lambdas(x0, a=[1.0, 1.0, 1.0], c=[0.0, 0.3, 0.0])
    assert not np.allclose(np.asarray(x0(tokens)), want)


def test_options_off_leave_the_model_bit_identical():
    cfg = normjax.ModelConfig(**TINY)
    off = cfg.replace(value_residual=False, x0_lambdas=False)
    a, b = (normjax.Transformer(c, rngs=nnx.Rngs(0)) for c in (cfg, off))
    sa, sb = nnx.to_pure_dict(nnx.state(a)), nnx.to_pure_dict(nnx.state(b))
    assert jax.tree.structure(sa) == jax.tree.structure(sb)
    assert all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(sa), jax.tree.leaves(sb), strict=True))
    tokens = model_inputs(cfg)[0]
    assert np.array_equal(np.asarray(a(tokens)), np.asarray(b(tokens)))
    assert not isinstance(a.stacks["decoder"].initial_state(jnp.zeros((1, 2, 16))), SkipStream)


def test_init_constants_and_shared_weights(x64):
    model = _model(value_residual=True, x0_lambdas=True)
    plain = _model()
    p, q = _params(model, 1), _params(plain, 1)
    assert float(p["value_lambda"]) == 0.5 and p["x0_lambdas"].tolist() == [1.0, 0.0]
    assert set(p) - set(q) == {"value_lambda", "x0_lambdas"}
    assert all(np.array_equal(p[k], q[k]) for k in q)  # the new scalars draw no randomness


@pytest.mark.parametrize("scan_layers", [False, True])
@pytest.mark.parametrize("l", [0, 2])
def test_block_jacobian_is_jacfwd_of_the_reference_block(l, scan_layers, x64):
    model = _model(value_residual=True, x0_lambdas=True)
    _set_lambdas(model, lam=[0.3, 0.6, -0.2], a=[0.8, 1.1, 0.6], c=[0.4, -0.3, 0.5])
    model = scan_twin(model) if scan_layers else model
    p = _params(model, l)
    rng = np.random.default_rng(2)
    state = SkipStream(*(jnp.asarray(rng.normal(size=(3, 16))) for _ in range(3)))
    fn = normjax.block_fn(model, l, "encoder")
    y = fn(state)
    want = _reference_block(tuple(a[None] for a in (state.x, state.x0, state.v1)), p, l)
    for got, ref in zip((y.x, y.x0, y.v1), want, strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(ref[0]), rtol=1e-12, atol=1e-12)
    flat, unravel = ravel_pytree(state)

    def reference(z):
        s = unravel(z)
        return ravel_pytree(_reference_block((s.x[None], s.x0[None], s.v1[None]), p, l))[0]

    J = np.asarray(normjax.jacobian.jacobian(fn, state))
    assert J.shape == (3 * 48, 3 * 48)
    np.testing.assert_allclose(J, np.asarray(jax.jacfwd(reference)(flat)), rtol=1e-11, atol=1e-11)
    if l == 0:  # block 0 ignores the v_1 it is given
        assert not J[:, 2 * 48 :].any()


def test_block_fn_and_probes_take_the_skip_state():
    model = tiny_model(value_residual=True, x0_lambdas=True)
    with pytest.raises(TypeError, match="SkipStream"):
        normjax.block_fn(model, 0)(jnp.zeros((3, 16)))
    tokens = model_inputs(model.cfg)[0]
    logits, probes = normjax.probe(model, tokens)
    assert np.allclose(np.asarray(logits), np.asarray(model(tokens)), atol=1e-6)
    streams = probes["decoder"].streams
    assert len(streams) == 3 and all(s.shape == (2, 5, 16) for s in streams)


@pytest.mark.parametrize(
    "fields",
    [dict(placement="resi_dual"), dict(placement="mhc"), dict(placement="ngpt")],
)
@pytest.mark.parametrize("option", ["value_residual", "x0_lambdas"])
def test_refused_combinations_raise_one_line(fields, option):
    with pytest.raises(ValueError, match=f"ModelConfig.{option}=True is invalid") as err:
        normjax.ModelConfig(**fields, **{option: True})
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="must be True or False"):
        normjax.ModelConfig(**{option: 1})


@pytest.mark.parametrize("arch", ["decoder", "encoder_decoder"])
def test_new_scalars_get_gradients(arch):
    model = tiny_model(arch=arch, num_layers=3, value_residual=True, x0_lambdas=True)
    inputs = model_inputs(model.cfg)
    grads = nnx.grad(lambda m: (m(*inputs) ** 2).mean())(model)
    for stack in model.cfg.stacks:
        layers = [grads["stacks"][stack]["layers"][l] for l in range(3)]
        lam = [float(g["value_lambda"].get_value()) for g in layers]
        assert lam[0] == 0.0 and all(v != 0.0 for v in lam[1:])  # block 0: (1 - lam) v + lam v = v
        assert all(np.abs(np.asarray(g["x0_lambdas"].get_value())).min() > 0 for g in layers)


def test_speedrun_recipe_builds_and_trains_in_the_quick_preset(tmp_path):
    """The recipe builds (loop and scan); three steps of `experiments.train --config=:quick` with its fields."""
    fields = specs.parse("speedrun").fields
    assert fields["value_residual"] and fields["x0_lambdas"]
    for scan in (False, True):
        model = tiny_model(scan_layers=scan, **fields)
        assert bool(jnp.isfinite(model(*model_inputs(model.cfg))).all())
    command = [sys.executable, "-m", "experiments.train", "--config=:quick", f"--workdir={tmp_path}"]
    command += ["--progress=false"] + [f"--config.model.{k}={v}" for k, v in fields.items()]
    command += ["--config.train.num_steps=3", "--config.train.warmup_steps=0", "--config.train.diag_every=0"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["steps"] == 3 and summary["diverged_step"] is None and np.isfinite(summary["best_valid_nll"])
