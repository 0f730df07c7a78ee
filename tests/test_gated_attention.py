"""Gated attention (Qiu et al. 2025, qiuzh20/gated_attention): a float64 numpy reference, init, config, default."""

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from model_fixtures import model_inputs, tiny_model
from test_schemes import H, _lin, _ln, _mlp, _randomize_norms

import normjax

F64 = dict(arch="encoder", param_dtype="float64", dtype="float64")


def _sigmoid(z):
    return 1 / (1 + np.exp(-z))


def _gated_attention(x, p, kind):
    """The authors' Qwen3Attention (modeling_qwen3.py lines 300-360) without RoPE, GQA or QK-norm:
    o_h = softmax(q_h k_h^T / sqrt(d_h)) v_h, o_h *= sigmoid(x W_g)[h] (one scalar, or d_h channels), W_O [o_h]."""
    B, T, D = x.shape
    q, k, v = (
        _lin(x, p, f"attn/{n}").reshape(B, T, H, D // H).transpose(0, 2, 1, 3) for n in ("query", "key", "value")
    )
    logits = q @ k.transpose(0, 1, 3, 2) / np.sqrt(D // H)
    w = np.exp(logits - logits.max(-1, keepdims=True))
    o_BTHK = ((w / w.sum(-1, keepdims=True)) @ v).transpose(0, 2, 1, 3)
    gate = _sigmoid(_lin(x, p, "attn/out_gate"))
    o_BTHK = o_BTHK * (gate[..., None] if kind == "headwise" else gate.reshape(B, T, H, D // H))
    return _lin(o_BTHK.reshape(B, T, D), p, "attn/out")


def _pre_gated(kind):  # Pre-LN, the gate computed from the normalised block input (Qwen's hidden_states)
    def block(x, p):
        h = x + _gated_attention(_ln(x, p, "attn/norm"), p, kind)
        return h + _mlp(_ln(h, p, "ffn/norm"), p)

    return block


@pytest.mark.parametrize("kind", ["headwise", "elementwise"])
@pytest.mark.parametrize("l", [0, 1])
def test_block_matches_the_published_formula(kind, l, x64):
    model = tiny_model(num_layers=2, attn_gate=kind, **F64)
    _randomize_norms(model)
    p = {k: np.asarray(v) for k, v in normjax.layer_params(nnx.state(model, nnx.Param), model, "encoder")[l].items()}
    assert np.abs(p["attn/out_gate/bias"]).max() == 0  # bias zero at init (the authors' _init_weights)
    p["attn/out_gate/bias"] = np.random.default_rng(2).normal(size=p["attn/out_gate/bias"].shape)
    model.stacks["encoder"].layers[l].attn.branch.out_gate.bias.set_value(jnp.asarray(p["attn/out_gate/bias"]))
    x = np.random.default_rng(1).normal(size=(2, 3, 16))
    got = np.asarray(normjax.block_fn(model, l, "encoder")(jnp.asarray(x)))
    np.testing.assert_allclose(got, _pre_gated(kind)(x, p), rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("kind, width", [("headwise", 4), ("elementwise", 64)])
@pytest.mark.parametrize("arch", ["decoder", "encoder_decoder"])
def test_init_gate_shapes_and_distribution(kind, width, arch):
    """One gate per head or per channel in every attention (cross attention too), kernel drawn as W^Q's
    (the authors' gate columns are part of q_proj), bias 0: sigmoid(x W_g) is 0.5 at x = 0."""
    cfg = normjax.ModelConfig(arch=arch, vocab_size=23, d_model=64, num_heads=4, d_ff=24, attn_gate=kind)
    model = normjax.Transformer(cfg, rngs=nnx.Rngs(0))
    for stack in cfg.stacks:
        block = model.stacks[stack].layers[0]
        subs = [block.attn] + ([block.cross] if block.cross is not None else [])
        for sub in subs:
            gate = sub.branch.out_gate
            assert gate.kernel[...].shape == (64, width)
            np.testing.assert_array_equal(gate.bias[...], 0.0)
            # Xavier normal, as every projection of this codebase: variance 2 / (fan_in + fan_out)
            var = float(jnp.var(gate.kernel[...]))
            assert var == pytest.approx(2 / (64 + width), rel=0.35)


def _with_gate(base, kind, bias):
    """A model with attn_gate=kind and base's parameters, every gate W_g = 0 and b_g = bias."""
    gated = tiny_model(attn_gate=kind)
    pure = nnx.to_pure_dict(nnx.state(base))
    for layer in pure["stacks"]["decoder"]["layers"].values():
        width = 2 if kind == "headwise" else 16
        layer["attn"]["branch"]["out_gate"] = {"kernel": jnp.zeros((16, width)), "bias": jnp.full((width,), bias)}
    state = nnx.state(gated)
    nnx.replace_by_pure_dict(state, pure)
    nnx.update(gated, state)
    return gated


@pytest.mark.parametrize("kind", ["headwise", "elementwise"])
def test_gate_at_one_is_the_ungated_model(kind):
    """With W_g = 0 and b_g = 40 (sigmoid = 1 in float32) the gated model equals the ungated one bit for bit:
    the gate multiplies the SDPA output and changes nothing else; at b_g = 0 (gate 1/2) it differs."""
    base = tiny_model(attn_gate=None)
    (tokens,) = model_inputs(base.cfg)
    want = np.asarray(base(tokens))
    np.testing.assert_array_equal(np.asarray(_with_gate(base, kind, 40.0)(tokens)), want)
    assert not np.allclose(np.asarray(_with_gate(base, kind, 0.0)(tokens)), want, atol=1e-3)


def test_default_has_no_gate_parameters():
    """attn_gate=None (the default) adds no parameter and draws no random number: the default model is unchanged."""
    model = tiny_model()
    assert model.cfg.attn_gate is None
    names = [str(path) for path, _ in nnx.to_flat_state(nnx.state(model, nnx.Param))]
    assert not any("out_gate" in n for n in names)
    assert all(layer.attn.branch.out_gate is None for layer in model.stacks["decoder"].layers)


@pytest.mark.parametrize(
    "fields, match",
    [
        (dict(attn_gate="sigmoid"), r"ModelConfig.attn_gate='sigmoid' is invalid: valid choices are None, 'headwise'"),
        (dict(attn_gate=True), r"attn_gate=True is invalid: valid choices are None, 'headwise', 'elementwise'"),
        (dict(attn_gate="headwise", placement="ngpt"), r"attn_gate='headwise'.*ngpt"),
        (dict(attn_gate="elementwise", theory=True, num_heads=1), r"attn_gate='elementwise'.*theory"),
    ],
)
def test_config_refuses_invalid_gates(fields, match):
    with pytest.raises(ValueError, match=match):
        normjax.ModelConfig(**fields)
