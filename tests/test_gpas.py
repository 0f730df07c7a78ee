"""GPAS (Chen et al. 2025, dandingsky/GPAS): init, float64 numpy references of the value, Jacobians and gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from model_fixtures import model_inputs, tiny_model
from test_schemes import _attention, _ln, _mlp, _randomize_norms

import normjax
from normjax.blocks import BlockContext

F64 = dict(arch="encoder", param_dtype="float64", dtype="float64")
ALPHAS = (0.8, -0.6, 0.5)  # one learned gate per block, set away from its init 0 (SiLU: 0.55, -0.21, 0.31)


def _silu(a):
    return a / (1 + np.exp(-a))


def _gpas(z, a, sg):  # x - SiLU(alpha) sg(x): GPASBlock, modeling_llama.py lines 261-268
    return z - _silu(a) * sg(z)


def _pre_gpas(x, p, a, sg):  # modeling_llama.py lines 491-510: the gate after each sublayer's residual add
    h = _gpas(x + _attention(_ln(x, p, "attn/norm"), p), a, sg)
    return _gpas(h + _mlp(_ln(h, p, "ffn/norm"), p), a, sg)


def _sandwich_gpas(x, p, a, sg):  # lines 512-533
    h = _gpas(x + _ln(_attention(_ln(x, p, "attn/norm"), p), p, "attn/norm2"), a, sg)
    return _gpas(h + _ln(_mlp(_ln(h, p, "ffn/norm"), p), p, "ffn/norm2"), a, sg)


def _deepnorm_gpas(alpha_dn):  # lines 535-553: the skip scaled, the branch reads the unscaled stream
    def block(x, p, a, sg):
        h = _ln(alpha_dn * _gpas(x, a, sg) + _attention(x, p), p, "attn/norm")
        return _ln(alpha_dn * _gpas(h, a, sg) + _mlp(h, p), p, "ffn/norm")

    return block


def _frozen(reference, x, a):
    """reference as the map backpropagation differentiates: every sg operand recorded at (x, a), then constant."""
    recorded = []
    reference(x, a, lambda z: recorded.append(z) or z)

    def at(z, alpha):
        replay = iter(recorded)
        return reference(z, alpha, lambda _: next(replay))

    return at


def _live(reference):
    return lambda z, alpha: reference(z, alpha, lambda v: v)


def _jacobian_fd(g, x, h=1e-5):
    cols = [(g(x + h * e.reshape(x.shape)) - g(x - h * e.reshape(x.shape))).ravel() / (2 * h) for e in np.eye(x.size)]
    return np.stack(cols, axis=1)


def _gpas_model(placement, num_layers=3):
    model = tiny_model(num_layers=num_layers, placement=placement, **F64)
    _randomize_norms(model)
    for l, a in enumerate(ALPHAS[:num_layers]):
        model.stacks["encoder"].block(l).gate.set_value(jnp.asarray(a))
    return model


def _case(placement, l):
    model = _gpas_model(placement)
    p = {k: np.asarray(v) for k, v in normjax.layer_params(nnx.state(model, nnx.Param), model, "encoder")[l].items()}
    references = {"pre_gpas": _pre_gpas, "sandwich_gpas": _sandwich_gpas}
    reference = references.get(placement) or _deepnorm_gpas(model.stacks["encoder"].block(l).attn.alpha)
    return model, lambda x, a, sg: reference(x, p, a, sg), float(p["gate"])


PLACEMENTS = ("pre_gpas", "sandwich_gpas", "deepnorm_gpas")


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("l", [0, 2])
def test_block_value_and_both_jacobians_match_the_reference(placement, l, x64):
    model, reference, a = _case(placement, l)
    assert a == ALPHAS[l]
    x = np.random.default_rng(1).normal(size=(1, 3, 16))
    fn = normjax.block_fn(model, l, "encoder")
    np.testing.assert_allclose(np.asarray(fn(jnp.asarray(x))), _live(reference)(x, a), rtol=1e-11, atol=1e-11)
    frozen, live = _frozen(reference, x, a), _live(reference)
    J_backprop_fd = _jacobian_fd(lambda z: frozen(z, a), x)
    J_forward_fd = _jacobian_fd(lambda z: live(z, a), x)
    J = np.asarray(normjax.jacobian.jacobian(fn, jnp.asarray(x[0])))
    J_forward = np.asarray(normjax.jacobian.jacobian(fn, jnp.asarray(x[0]), stop_gradient="identity"))
    np.testing.assert_allclose(J, J_backprop_fd, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(J_forward, J_forward_fd, rtol=1e-6, atol=1e-7)
    assert np.abs(J - J_forward).max() > 0.1  # alpha != 0: the two Jacobians differ
    # backpropagation's gradient in the block input is J^T u, J the frozen one
    u = np.random.default_rng(2).normal(size=x.shape)
    grad_x = jax.grad(lambda z: jnp.sum(fn(z) * u))(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(grad_x).ravel(), J_backprop_fd.T @ u.ravel(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_alpha_gradient_is_the_frozen_maps_derivative(placement, x64):
    """d loss / d alpha by backpropagation is the derivative with the later sg operands held fixed: a central
    difference of the frozen reference in alpha, not of the loss itself (the block's second GPAS reads sg of
    a stream alpha already scaled)."""
    l = 1
    model, reference, a = _case(placement, l)
    x = np.random.default_rng(1).normal(size=(1, 3, 16))
    u = np.random.default_rng(3).normal(size=x.shape)
    block = model.stacks["encoder"].block(l)
    grads = nnx.grad(lambda b: jnp.sum(b(jnp.asarray(x), BlockContext())[0] * u))(block)
    got, h = float(grads["gate"][...]), 1e-6
    frozen, live = _frozen(reference, x, a), _live(reference)
    surrogate = ((frozen(x, a + h) - frozen(x, a - h)) * u).sum() / (2 * h)
    loss_fd = ((live(x, a + h) - live(x, a - h)) * u).sum() / (2 * h)
    assert got == pytest.approx(surrogate, rel=1e-7)
    assert abs(got - loss_fd) > 1e-3 * abs(loss_fd)


def test_gpas_op_passes_the_gradient_unscaled_and_alpha_gets_the_loss_derivative(x64):
    """One GPAS: value (1 - SiLU(alpha)) x; d loss / d x = d loss / d y at that value (no (1 - SiLU) factor);
    d loss / d alpha equals a central difference of the loss (no later sg depends on alpha)."""
    x = jnp.asarray(np.random.default_rng(0).normal(size=(3, 16)))
    w = jnp.asarray(np.random.default_rng(1).normal(size=(3, 16)))
    loss = lambda z, a: jnp.sum(w * normjax.placements.gpas(z, a) ** 2)
    a, c = 0.7, _silu(0.7)
    y = normjax.placements.gpas(x, jnp.asarray(a))
    np.testing.assert_allclose(y, (1 - c) * np.asarray(x), rtol=1e-15)
    grad_x, grad_a = jax.grad(loss, argnums=(0, 1))(x, jnp.asarray(a))
    np.testing.assert_allclose(grad_x, 2 * np.asarray(w) * np.asarray(y), rtol=1e-14)  # d loss / d y, unscaled
    h = 1e-6
    assert float(grad_a) == pytest.approx((float(loss(x, a + h)) - float(loss(x, a - h))) / (2 * h), rel=1e-8)


def test_model_alpha_gradients_at_init_are_the_loss_derivatives(x64):
    """At init every SiLU(alpha) = 0, so the sg factors (1 - SiLU) are 1 and backpropagation's d loss / d alpha_l is
    the loss's own derivative, for every block of the stack."""
    model = tiny_model(num_layers=3, placement="pre_gpas", **F64)
    (tokens,) = model_inputs(model.cfg)
    w = jnp.asarray(np.random.default_rng(0).normal(size=model(tokens).shape))
    loss = lambda m: jnp.sum(m(tokens) * w)
    grads = nnx.grad(loss)(model)
    h = 1e-6
    for l in range(3):
        gate = model.stacks["encoder"].block(l).gate
        gate.set_value(jnp.asarray(h))
        up = float(loss(model))
        gate.set_value(jnp.asarray(-h))
        down = float(loss(model))
        gate.set_value(jnp.asarray(0.0))
        got = float(grads["stacks"]["encoder"]["layers"][l]["gate"][...])
        assert got == pytest.approx((up - down) / (2 * h), rel=1e-6, abs=1e-9)


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("arch", ["decoder", "encoder_decoder"])
@pytest.mark.parametrize("scan_layers", [False, True])
def test_init_one_zero_alpha_per_block_and_the_base_model_bit_for_bit(placement, arch, scan_layers):
    """alpha = 0 (GPASBlock's gate_init_value, line 262), one per block shared by its sublayers (line 339: one
    GPASBlock per decoder layer, applied after both); SiLU(0) = 0, so the model is its base placement's, bit for bit,
    with the same draws."""
    base = tiny_model(arch=arch, placement=placement.removesuffix("_gpas"), scan_layers=scan_layers)
    model = tiny_model(arch=arch, placement=placement, scan_layers=scan_layers)
    for stack in model.cfg.stacks:
        for l in range(model.cfg.stack_depth(stack)):
            block = model.stacks[stack].block(l)
            assert block.gate[...].shape == () and float(block.gate[...]) == 0.0
            assert all(sub.gate is None for sub in block.sublayers())
    inputs = model_inputs(model.cfg)
    np.testing.assert_array_equal(np.asarray(model(*inputs)), np.asarray(base(*inputs)))


def test_default_model_has_no_gpas_gate():
    model = tiny_model()
    assert model.cfg.placement == "pre"
    assert all(layer.gate is None for layer in model.stacks["decoder"].layers)
    names = [str(path) for path, _ in nnx.to_flat_state(nnx.state(model, nnx.Param))]
    assert not any("gate" in n for n in names)
