"""Every placement's wiring reads like its formula: checked against numpy references and each other."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from model_fixtures import model_inputs, tiny_model

import normjax
from normjax.blocks import BlockContext
from normjax.config import LAYER_PLACEMENTS, NORMS, PLACEMENTS


def _np_layernorm(z, p, prefix, eps=1e-5):
    c = z - z.mean(-1, keepdims=True)
    return c / np.sqrt((c**2).mean(-1, keepdims=True) + eps) * p[f"{prefix}/scale"] + p[f"{prefix}/bias"]


def _np_linear(x, p, name):
    return x @ p[f"{name}/kernel"] + p[f"{name}/bias"]


def _np_attention(x, p, heads, causal=False):
    B, T, D = x.shape
    q, k, v = (
        _np_linear(x, p, f"attn/{n}").reshape(B, T, heads, D // heads).transpose(0, 2, 1, 3)
        for n in ("query", "key", "value")
    )
    logits = q @ k.transpose(0, 1, 3, 2) / np.sqrt(D // heads)
    if causal:
        logits = np.where(np.tril(np.ones((T, T), bool)), logits, -np.inf)
    w = np.exp(logits - logits.max(-1, keepdims=True))
    w = w / w.sum(-1, keepdims=True)
    return _np_linear((w @ v).transpose(0, 2, 1, 3).reshape(B, T, D), p, "attn/out")


def _np_mlp(x, p):
    return _np_linear(np.maximum(_np_linear(x, p, "ffn/fc1"), 0), p, "ffn/fc2")


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_pre_and_post_blocks_match_numpy_reference(placement, x64):
    model = tiny_model(placement=placement, arch="encoder", param_dtype="float64", dtype="float64")
    params = normjax.layer_params(nnx.state(model, nnx.Param), model, "encoder")[1]
    p = {k: np.asarray(v) for k, v in params.items()}
    x = np.random.default_rng(0).normal(size=(2, 5, 16))
    y = np.asarray(normjax.block_fn(model, 1, "encoder")(jnp.asarray(x)))
    att = lambda h: _np_attention(h, p, heads=2)
    if placement == "pre":  # x + F(LN(x)): the block output minus its input is the branch on LN(x)
        h = x + att(_np_layernorm(x, p, "attn/norm"))
        expected = h + _np_mlp(_np_layernorm(h, p, "ffn/norm"), p)
    else:  # LN(x + F(x))
        h = _np_layernorm(x + att(x), p, "attn/norm")
        expected = _np_layernorm(h + _np_mlp(h, p), p, "ffn/norm")
    np.testing.assert_allclose(y, expected, rtol=1e-12, atol=1e-12)


def _expected_sublayer(block, sub, x, records, name, x_in):
    """The placement's formula applied to the branch output that the block recorded (x_in: the block's input)."""
    out = records[f"{sub.name}.out"]
    placement = block.placement
    if placement == "b2t":  # Post-LN, the FFN also adds the block's input
        placement = "b2t_ffn" if sub.name == "ffn" else "post"
    if placement == "hybrid":  # HybridNorm's code: attention x + F(x); FFN u = N(x), u + F(u)
        placement = "normed" if sub.name == "ffn" else "tfixup"
    if placement == "normformer":
        placement = "sandwich" if sub.name == "attn" else "pre"
    placement = {"peri_ln": "sandwich", "hybrid_first": "pre", "subln": "pre", "lns": "pre"}.get(placement, placement)
    placement = "hyper" if placement in normjax.hyper.HYPER_KINDS else placement
    gate = block.gate[...] if block.gate is not None else (sub.gate[...] if sub.gate is not None else 0)
    return {
        "post": lambda: sub.norm(x + out),
        "pre": lambda: x + out,
        "sandwich": lambda: x + sub.norm2(out),
        "branch_post": lambda: x + sub.norm(out),
        "deepnorm": lambda: sub.norm(sub.alpha * x + out),
        "admin": lambda: sub.norm(sub.omega[...] * x + out),
        "rezero": lambda: x + gate * out,
        "skipinit": lambda: x + gate * out,
        "layerscale": lambda: x + gate * out,
        "tfixup": lambda: x + out,
        "keel": lambda: sub.norm2(x + out),
        "b2t_ffn": lambda: sub.norm(x + out + x_in),
        "normed": lambda: sub.norm(x) + out,
        "resi_dual": lambda: normjax.DualStream(sub.norm(x.x + out), x.d + out),
        "siamese": lambda: normjax.DualStream(sub.norm2(x.x) + out * sub.lns_scale[...] * 2**-0.5, x.d + out),
        "hyper": lambda: _hyper_expected(sub, x, out),
        "ngpt": lambda: _unit(_unit(x) + jnp.abs(gate * sub.eigen_factor) * (_unit(out) - _unit(x))),
        "pre_gpas": lambda: _gpas_value(x + out, gate),
        "sandwich_gpas": lambda: _gpas_value(x + sub.norm2(out), gate),
        "deepnorm_gpas": lambda: sub.norm(sub.alpha * _gpas_value(x, gate) + out),
    }[placement]()


def _gpas_value(z, alpha):
    """GPAS's forward value (1 - SiLU(alpha)) z (tests/test_gpas.py checks its gradients)."""
    return (1 - alpha * jax.nn.sigmoid(alpha)) * z


def _hyper_expected(sub, hs, out):
    """X' = H_res X + H_post^T F with the sublayer's own H (tests/test_multistream.py checks the H themselves)."""
    X = jnp.stack(hs.streams, axis=-2)
    pre, post, res = sub.hyper.matrices(X)
    Y = jnp.einsum("...ij,...jd->...id", res, X) + post[..., None] * out[..., None, :]
    return normjax.HyperStreams(tuple(Y[..., i, :] for i in range(hs.n)))


def _unit(z):
    return z / jnp.linalg.norm(z, axis=-1, keepdims=True)


def _refused(placement, arch):
    """ngpt defines no encoder-decoder: ModelConfig refuses it (docs/placements.md)."""
    if placement == "ngpt" and arch == "encoder_decoder":
        with pytest.raises(ValueError, match="ngpt"):
            tiny_model(arch=arch, placement=placement)
        return True
    return False


@pytest.mark.parametrize("placement", LAYER_PLACEMENTS)
@pytest.mark.parametrize("arch", ["decoder", "encoder_decoder"])
def test_each_sublayer_follows_its_placement_formula(placement, arch):
    if _refused(placement, arch):
        return
    model = tiny_model(arch=arch, placement=placement, layerscale_init=0.3)
    inputs = model_inputs(model.cfg)
    stack = model.cfg.stacks[-1]
    ctx = normjax.block_context(model, *inputs, stack=stack)
    block = model.stacks[stack].block(1)
    # Non-zero gates so the branch matters (ReZero/SkipInit start at zero).
    for gate in [block.gate] + [s.gate for s in block.sublayers()]:
        if gate is not None:
            gate.set_value(jnp.full_like(gate[...], 0.7))
    x = jax.random.normal(jax.random.key(1), inputs[-1].shape + (16,))
    if model.cfg.has_dual_stream(stack):  # ResiDual: the pair (x, d), d != x after the first block
        x = normjax.DualStream(x, 2.0 * x)
    if model.cfg.stream_kind(stack) == "hyper":  # n distinct streams
        x = normjax.HyperStreams(tuple((i + 1.0) * x for i in range(model.cfg.num_streams(stack))))
    x_in = x
    for sub in block.sublayers():
        records = {}
        y = block.apply_sublayer(sub, x, ctx, records, block_input=x_in)
        expected = _expected_sublayer(block, sub, x, records, sub.name, x_in)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5), y, expected)
        if placement in (
            "pre",
            "sandwich",
            "peri_ln",
            "layerscale",
            "subln",
            "normformer",
            "hybrid_first",
            "lns",
            "keel",
        ):
            np.testing.assert_array_equal(records[f"{sub.name}.pre"], x)
        if placement == "lns":  # the norm's output times 1/sqrt(l), l = 2 for block 1
            assert float(sub.lns_scale[...]) == pytest.approx(2**-0.5)
        if placement in ("post", "deepnorm", "admin", "keel", "b2t"):
            assert f"{sub.name}.post" in records
        if placement in ("hybrid", "hybrid_first") and sub.name != "ffn":
            assert {f"{sub.name}.q", f"{sub.name}.k", f"{sub.name}.v"} <= set(records)
            assert records[f"{sub.name}.q"].shape[-2:] == (2, 8)  # per head: (H, d_model / H)
        x = y


@pytest.mark.parametrize("arch", ["decoder", "encoder", "encoder_decoder"])
def test_deepnorm_with_unit_constants_equals_post(arch):
    inputs = model_inputs(tiny_model(arch=arch).cfg)
    post = tiny_model(arch=arch, placement="post")
    deep = tiny_model(arch=arch, placement="deepnorm", deepnorm_alpha=1.0, deepnorm_beta=1.0)
    np.testing.assert_array_equal(post(*inputs), deep(*inputs))
    scaled = tiny_model(arch=arch, placement="deepnorm")
    assert not np.allclose(post(*inputs), scaled(*inputs))


@pytest.mark.parametrize("arch", ["decoder", "encoder", "encoder_decoder"])
def test_admin_with_unit_omega_equals_post(arch):
    inputs = model_inputs(tiny_model(arch=arch).cfg)
    post = tiny_model(arch=arch, placement="post")
    admin = tiny_model(arch=arch, placement="admin", admin_omega=1.0)
    np.testing.assert_array_equal(post(*inputs), admin(*inputs))


@pytest.mark.parametrize(
    "fields",
    [
        dict(placement="rezero"),
        dict(placement="skipinit"),
        dict(placement="rezero", rezero_per_sublayer=True),
        dict(placement="layerscale", layerscale_init=0.0),
    ],
)
@pytest.mark.parametrize("arch", ["decoder", "encoder_decoder"])
def test_zero_gated_placements_are_the_identity_at_init(fields, arch):
    model = tiny_model(arch=arch, num_layers=3, **fields)
    inputs = model_inputs(model.cfg)
    stack = model.cfg.stacks[-1]
    ctx = normjax.block_context(model, *inputs, stack=stack)
    x = jax.random.normal(jax.random.key(2), inputs[-1].shape + (16,))
    np.testing.assert_array_equal(normjax.stack_fn(model, stack=stack, context=ctx)(x), x)


def test_mixln_wires_post_then_pre():
    model = tiny_model(placement="mixln", num_layers=4)
    assert [model.stacks["decoder"].block(l).placement for l in range(4)] == ["post"] + ["pre"] * 3
    _, probes = normjax.probe(model, *model_inputs(model.cfg))
    assert "ffn.post" in probes["decoder"].norm_inputs[0]
    assert "ffn.pre" in probes["decoder"].norm_inputs[1]


def _builds(arch, **fields):
    model = tiny_model(arch=arch, num_layers=4, **fields)
    logits = model(*model_inputs(model.cfg))
    assert logits.shape == (2, 6 if arch == "encoder_decoder" else 5, 23)
    assert bool(jnp.isfinite(logits).all())


@pytest.mark.parametrize("arch", ["decoder", "encoder", "encoder_decoder"])
@pytest.mark.parametrize("placement", PLACEMENTS)
def test_every_placement_builds_in_every_arch_and_is_finite(placement, arch):
    if _refused(placement, arch):
        return
    _builds(arch, placement=placement, norm="rmsnorm" if placement == "hybrid" else "layernorm")


@pytest.mark.parametrize("arch", ["decoder", "encoder_decoder"])
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("placement", ["post", "pre", "normformer", "hybrid_star"])
def test_every_norm_kind_builds_with_placements_and_options(placement, norm, arch):
    _builds(arch, placement=placement, norm=norm, qk_norm=True, norm_bias=False, embedding_norm=True)


def test_block_context_defaults_to_causal_for_decoder_blocks():
    model = tiny_model(placement="pre")
    x = jax.random.normal(jax.random.key(0), (5, 16))
    causal = normjax.block_fn(model, 0)(x)
    full = normjax.block_fn(model, 0, context=BlockContext())(x)
    np.testing.assert_allclose(causal[-1], full[-1], rtol=1e-5, atol=1e-6)  # last token sees all
    assert not np.allclose(causal[0], full[0])
