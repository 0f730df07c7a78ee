"""The 2024-26 schemes (LNS, KEEL, B2T, branch multiplier, gains, QK-norm scope, soft-caps, clipping, Derf, z-loss)
against float64 numpy references written from their published formulas."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from model_fixtures import model_inputs, tiny_model
from test_schemes import H, _lin, _ln, _mlp, _randomize_norms

import normjax
from normjax import specs
from normjax.train.steps import token_losses

F64 = dict(arch="encoder", param_dtype="float64", dtype="float64")


def _attention(x, p, full_qk=False, clip=None, cap=None):
    """Multi-head self attention; q/k clipped, normalised over the full width before the head split, soft-capped."""
    B, T, D = x.shape
    z = {r: _lin(x, p, f"attn/{n}") for r, n in zip("qkv", ("query", "key", "value"), strict=True)}
    if clip is not None:
        z = {r: np.clip(v, -clip, clip) for r, v in z.items()}
    if full_qk:
        z = {r: _ln(v, p, f"attn/qk_full_norm/{r}") if r in "qk" else v for r, v in z.items()}
    q, k, v = (z[r].reshape(B, T, H, D // H).transpose(0, 2, 1, 3) for r in "qkv")
    logits = q @ k.transpose(0, 1, 3, 2) / np.sqrt(D // H)
    if cap is not None:
        logits = cap * np.tanh(logits / cap)
    w = np.exp(logits - logits.max(-1, keepdims=True))
    o = ((w / w.sum(-1, keepdims=True)) @ v).transpose(0, 2, 1, 3).reshape(B, T, D)
    return _lin(o, p, "attn/out")


def _lns(x, p, l):  # Sun et al. 2025: x + F(N(x) / sqrt(l)), l = block index + 1
    s = 1 / math.sqrt(l + 1)
    h = x + _attention(_ln(x, p, "attn/norm") * s, p)
    return h + _mlp(_ln(h, p, "ffn/norm") * s, p)


def _keel(x, p, l):  # x-transformers pre_and_post_norm: N2(x + F(N1(x)))
    h = _ln(x + _attention(_ln(x, p, "attn/norm"), p), p, "attn/norm2")
    return _ln(h + _mlp(_ln(h, p, "ffn/norm"), p), p, "ffn/norm2")


def _b2t(x, p, l):  # Takase et al. 2022: h = N(x + Attn(x)); N(h + FFN(h) + x)
    h = _ln(x + _attention(x, p), p, "attn/norm")
    return _ln(h + _mlp(h, p) + x, p, "ffn/norm")


def _pre_multiplied(m):  # CompleteP / depth-muP: x + m F(N(x))
    def block(x, p, l):
        h = x + m * _attention(_ln(x, p, "attn/norm"), p)
        return h + m * _mlp(_ln(h, p, "ffn/norm"), p)

    return block


def _pre_attention(**kw):  # Pre-LN whose attention has full-width QK-norm, q/k/v clipping or a logit soft-cap
    def block(x, p, l):
        h = x + _attention(_ln(x, p, "attn/norm"), p, **kw)
        return h + _mlp(_ln(h, p, "ffn/norm"), p)

    return block


def _numpy_params(model, l):
    return {k: np.asarray(v) for k, v in normjax.layer_params(nnx.state(model, nnx.Param), model, "encoder")[l].items()}


CASES = [
    (dict(placement="lns"), _lns),
    (dict(placement="keel"), _keel),
    (dict(placement="b2t"), _b2t),
    (dict(placement="pre", branch_multiplier_alpha=1.0), _pre_multiplied(1 / 3)),  # CompleteP, L = 3
    (dict(placement="pre", branch_multiplier_alpha=0.5, branch_multiplier_base_depth=2), _pre_multiplied(1.5**-0.5)),
    (dict(placement="pre", qk_norm=True, qk_norm_scope="full"), _pre_attention(full_qk=True)),
    (dict(placement="pre", qkv_clip=0.3), _pre_attention(clip=0.3)),
    (dict(placement="pre", attn_logit_softcap=0.5), _pre_attention(cap=0.5)),
]


@pytest.mark.parametrize("fields, reference", CASES)
@pytest.mark.parametrize("l", [0, 2])
def test_block_forward_and_jacobian_match_published_formula(fields, reference, l, x64):
    model = tiny_model(num_layers=3, **F64, **fields)
    _randomize_norms(model)
    p = _numpy_params(model, l)
    x = np.random.default_rng(1).normal(size=(1, 3, 16))
    fn = normjax.block_fn(model, l, "encoder")
    np.testing.assert_allclose(np.asarray(fn(jnp.asarray(x))), reference(x, p, l), rtol=1e-11, atol=1e-11)
    # the Jacobian against central differences of the numpy reference (truncation error ~ h^2)
    J = np.asarray(normjax.jacobian.jacobian(fn, jnp.asarray(x[0])))
    h, n = 1e-5, x.size
    J_fd = np.stack(
        [
            (reference(x + h * e.reshape(x.shape), p, l) - reference(x - h * e.reshape(x.shape), p, l)).ravel()
            / (2 * h)
            for e in np.eye(n)
        ],
        axis=1,
    )
    np.testing.assert_allclose(J, J_fd, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("scan_layers", [False, True])
@pytest.mark.parametrize("arch", ["decoder", "encoder_decoder"])
def test_lns_scales_are_one_over_sqrt_of_the_block_position(arch, scan_layers):
    model = tiny_model(arch=arch, placement="lns", num_layers=4, scan_layers=scan_layers)
    for stack in model.cfg.stacks:
        for l in range(4):
            block = model.stacks[stack].block(l)
            for sub in block.sublayers():
                assert float(sub.lns_scale[...]) == pytest.approx(1 / math.sqrt(l + 1), rel=1e-7)
        assert float(model.stacks[stack].block(0).ffn.lns_scale[...]) == 1.0
        assert float(model.stacks[stack].block(3).attn.lns_scale[...]) == pytest.approx(0.5)  # 1/sqrt(L), L = 4
        assert model.stacks[stack].final_norm is not None


def test_b2t_init_scales_every_block_weight_by_one_over_sqrt_depth():
    wide = dict(vocab_size=11, d_model=256, num_heads=4, d_ff=256, num_layers=9)
    base = normjax.Transformer(normjax.ModelConfig(arch="encoder_decoder", placement="post", **wide), rngs=nnx.Rngs(0))
    b2t = normjax.Transformer(normjax.ModelConfig(arch="encoder_decoder", placement="b2t", **wide), rngs=nnx.Rngs(0))
    for stack in ("encoder", "decoder"):
        got, want = (normjax.layer_params(nnx.state(m, nnx.Param), m, stack)[4] for m in (b2t, base))
        kernels = [k for k in want if k.endswith("/kernel")]
        assert len(kernels) == (10 if stack == "decoder" else 6)  # q, k, v, o (self, cross), fc1, fc2
        for k in kernels:  # same seed, same draws: exactly the base init times 9^(-1/2)
            np.testing.assert_allclose(got[k], want[k] / 3.0, rtol=1e-6, err_msg=k)


def test_b2t_sublayer_alone_is_refused_it_reads_the_block_input():
    model = tiny_model(placement="b2t")
    x = jax.random.normal(jax.random.key(0), (5, 16))
    normjax.sublayer_fn(model, 0, "attn")(x)  # Post-LN sublayers are functions of x alone
    with pytest.raises(TypeError, match="B2T.*block's input"):
        normjax.sublayer_fn(model, 0, "ffn")(x)


def test_zero_centred_gain_at_zero_equals_unit_gamma():
    inputs = model_inputs(tiny_model().cfg)
    for norm in ("layernorm", "rmsnorm", "dyt", "derf"):
        one = tiny_model(placement="sandwich", norm=norm, qk_norm=True)
        zero = tiny_model(placement="sandwich", norm=norm, qk_norm=True, norm_gain="zero_centred")
        offsets = [v for k, v in nnx.to_flat_state(nnx.state(zero, nnx.Param)) if k[-1] == "scale_offset"]
        assert offsets and all(float(jnp.abs(v[...]).max()) == 0.0 for v in offsets)
        np.testing.assert_array_equal(one(*inputs), zero(*inputs))


def test_zero_centred_gain_in_bfloat16_params_forms_one_plus_g_in_float32():
    norm = normjax.make_norm("rmsnorm", 8, eps=0.0, gain="zero_centred", param_dtype=jnp.bfloat16)
    g = jnp.full((8,), 2.0**-10, jnp.bfloat16)  # exact in bfloat16, but 1 + g rounds to 1 in bfloat16
    assert float(jnp.bfloat16(1) + g[0]) == 1.0
    norm.scale_offset.set_value(g)
    z = np.random.default_rng(0).normal(size=(3, 8)).astype(np.float32)
    zhat = z / np.sqrt((z.astype(np.float64) ** 2).mean(-1, keepdims=True))
    np.testing.assert_allclose(norm(jnp.asarray(z)), zhat * (1 + 2.0**-10), rtol=1e-6)
    assert not np.allclose(norm(jnp.asarray(z)), zhat, rtol=1e-4)
    weightless = normjax.make_norm("rmsnorm", 8, eps=0.0, gain="none")
    assert not nnx.state(weightless, nnx.Param)
    np.testing.assert_allclose(weightless(jnp.asarray(z)), zhat, rtol=1e-6)


def test_full_width_qk_norm_mixes_heads_per_head_does_not(x64):
    full = tiny_model(qk_norm=True, qk_norm_scope="full", **F64).stacks["encoder"].block(0).attn.branch
    head = tiny_model(qk_norm=True, **F64).stacks["encoder"].block(0).attn.branch
    assert full.qkv_norm is None and head.qk_full_norm is None
    q = jax.random.normal(jax.random.key(0), (16,), jnp.float64)
    J_full = np.asarray(jax.jacfwd(full.qk_full_norm["q"])(q))
    J_head = np.asarray(jax.jacfwd(lambda z: head.qkv_norm["q"](z.reshape(H, 8)).reshape(16))(q))
    cross = np.ones((16, 16), bool)
    cross[:8, :8] = cross[8:, 8:] = False  # entries d out_head1 / d in_head2 and back
    assert np.abs(J_full[cross]).max() > 1e-3
    np.testing.assert_array_equal(J_head[cross], 0.0)


def test_soft_caps_bound_the_logits():
    tokens = model_inputs(tiny_model().cfg)[0]
    model = tiny_model(final_logit_softcap=3.0, attn_logit_softcap=2.0, qk_norm=False)
    table = model.embedders["decoder"].table.embedding
    table.set_value(table[...] * 100.0)  # raw logits in the hundreds
    capped = model(tokens)
    assert 2.9 < float(jnp.abs(capped).max()) <= 3.0  # |c tanh(z / c)| <= c (tanh rounds to 1 in float32)
    raw = tiny_model(attn_logit_softcap=2.0)
    raw.embedders["decoder"].table.embedding.set_value(table[...])
    np.testing.assert_allclose(capped, 3.0 * np.tanh(np.asarray(raw(tokens)) / 3.0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(normjax.layers.softcap(jnp.asarray([0.0, 1e-3, 1e4]), 50.0), [0, 1e-3, 50.0], rtol=1e-6)


def test_derf_formula_and_per_site_alpha(x64):
    norm = normjax.make_norm("derf", 7, dyt_alpha=0.7, param_dtype=x64)
    assert float(norm.alpha[...]) == 0.7 and float(norm.shift[...]) == 0.0
    norm.shift.set_value(jnp.asarray(0.2))
    norm.scale.set_value(jnp.arange(1.0, 8.0))
    norm.bias.set_value(jnp.full(7, 0.5))
    z = np.random.default_rng(0).normal(size=(3, 7))
    erf = np.vectorize(math.erf)
    np.testing.assert_allclose(norm(jnp.asarray(z)), np.arange(1.0, 8.0) * erf(0.7 * z + 0.2) + 0.5, rtol=1e-13)
    sites = dict(dyt_alpha_attn=0.8, dyt_alpha_ffn=0.2, dyt_alpha_final=0.1)
    for kind in ("dyt", "derf"):
        model = tiny_model(arch="encoder_decoder", placement="sandwich", norm=kind, qk_norm=True, **sites)
        block = model.stacks["decoder"].block(1)
        for sub, want in ((block.attn, 0.8), (block.cross, 0.8), (block.ffn, 0.2)):
            assert float(sub.norm.alpha[...]) == float(sub.norm2.alpha[...]) == pytest.approx(want)
        assert float(block.attn.branch.qkv_norm["q"].alpha[...]) == 0.5  # other sites: dyt_alpha
        assert float(model.stacks["encoder"].final_norm.alpha[...]) == pytest.approx(0.1)


def test_z_loss_adds_coefficient_times_squared_log_partition(x64):
    logits = jax.random.normal(jax.random.key(0), (2, 3, 5), jnp.float64) * 4
    targets, mask = jnp.array([[0, 1, 2], [3, 4, 0]]), jnp.array([[1, 1, 1], [1, 1, 0]], bool)
    plain, z = token_losses(logits, targets, mask, 0.0), token_losses(logits, targets, mask, 0.0, z_loss=1e-4)
    lse = np.log(np.exp(np.asarray(logits)).sum(-1))
    np.testing.assert_allclose(z["loss"] - plain["loss"], 1e-4 * (lse**2 * np.asarray(mask)).sum(), rtol=1e-10)
    assert z["nll"] == plain["nll"]


def _peer_deeppost_constants(N: int) -> tuple[float, float]:
    """The Mix-LN / LayerNorm-Scaling repositories' `deeppost` (modeling_llama.py): skip 2 sqrt(2), gain (8N)^(+1/4)."""
    return 2 * math.sqrt(2), (8 * N) ** 0.25


def test_deepnorm_init_shrinks_ffn_v_o_and_the_peer_bug_would_not():
    cfg = normjax.ModelConfig(vocab_size=11, d_model=256, num_heads=4, d_ff=256, num_layers=12, placement="deepnorm")
    deep, base = (normjax.Transformer(c, rngs=nnx.Rngs(0)) for c in (cfg, cfg.replace(placement="post")))
    alpha, beta = normjax.deepnorm_constants("decoder", "decoder", 0, 12)
    assert (alpha, beta) == pytest.approx((24**0.25, 96**-0.25)) and beta < 1
    got, want = (normjax.layer_params(nnx.state(m, nnx.Param), m, "decoder")[5] for m in (deep, base))
    for name in ("attn/value", "attn/out", "ffn/fc1", "ffn/fc2"):
        assert np.std(got[f"{name}/kernel"]) < np.std(want[f"{name}/kernel"])
        np.testing.assert_allclose(got[f"{name}/kernel"], beta * want[f"{name}/kernel"], rtol=1e-6)
    for name in ("attn/query", "attn/key"):
        np.testing.assert_array_equal(got[f"{name}/kernel"], want[f"{name}/kernel"])
    # the named negative case: the peer code's gain grows the weights instead, 9.8x the paper's at 12 layers
    peer_skip, peer_gain = _peer_deeppost_constants(12)
    assert peer_gain > 1 and peer_gain / beta == pytest.approx(math.sqrt(96)) and round(peer_gain / beta, 1) == 9.8
    assert peer_skip != pytest.approx(alpha, rel=0.1)  # 2.83 vs (2N)^(1/4) = 2.21


OPTIONS = [
    dict(norm="rmsnorm", norm_gain="zero_centred"),
    dict(norm="rmsnorm", norm_gain="none", qk_norm=True),
    dict(qk_norm=True, qk_norm_scope="full"),
    dict(norm="derf", dyt_alpha_attn=0.8, dyt_alpha_ffn=0.2, dyt_alpha_final=0.2),
    dict(attn_logit_softcap=50.0, final_logit_softcap=30.0, qkv_clip=8.0, z_loss=1e-4),
    dict(branch_multiplier_alpha=1.0),
]


@pytest.mark.parametrize("arch", ["decoder", "encoder", "encoder_decoder"])
@pytest.mark.parametrize("placement", ["lns", "keel", "b2t", "pre", "post"])
@pytest.mark.parametrize("fields", OPTIONS)
def test_new_options_build_with_new_placements_in_every_arch(fields, placement, arch):
    model = tiny_model(arch=arch, num_layers=3, placement=placement, **fields)
    logits = model(*model_inputs(model.cfg))
    assert bool(jnp.isfinite(logits).all())


@pytest.mark.parametrize(
    "fields, match",
    [
        (dict(qk_norm_scope="full"), r"qk_norm_scope='full'.*set qk_norm=True"),
        (dict(qk_norm=True, qk_norm_scope="full", placement="hybrid_star"), r"'hybrid\w*' already normalises q and k"),
        (dict(qk_norm_scope="all"), r"qk_norm_scope='all'.*'head', 'full'"),
        (dict(norm="scalenorm", norm_gain="zero_centred"), r"norm_gain.*per-channel gamma"),
        (dict(norm_gain="unit"), r"norm_gain='unit'.*'one', 'zero_centred', 'none'"),
        (dict(dyt_alpha_ffn=0.3), r"dyt_alpha_ffn=0.3.*norm 'layernorm' has none"),
        (dict(final_logit_softcap=-1.0), r"final_logit_softcap=-1.0.*positive"),
        (dict(qkv_clip=0.0), r"qkv_clip=0.0.*positive"),
        (dict(z_loss=-1e-4), r"z_loss=-0.0001.*>= 0"),
        (dict(branch_multiplier_base_depth=2), r"branch_multiplier_base_depth=2.*needs branch_multiplier_alpha"),
        (dict(placement="ngpt", branch_multiplier_alpha=1.0), r"branch_multiplier_alpha.*ngpt"),
        (dict(placement="ngpt", norm_gain="none"), r"norm_gain='none'.*ngpt"),
    ],
)
def test_invalid_recipe_options_raise_one_line_naming_field_and_reason(fields, match):
    with pytest.raises(ValueError, match=match) as err:
        normjax.ModelConfig(**fields)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("recipe", sorted(specs.RECIPES))
@pytest.mark.parametrize("arch", ["decoder", "encoder_decoder"])
def test_recipe_presets_parse_and_build(recipe, arch):
    spec = specs.parse(recipe)
    assert spec.text == recipe and spec.is_variant
    model = tiny_model(arch=arch, **spec.fields)
    assert bool(jnp.isfinite(model(*model_inputs(model.cfg))).all())


def test_recipe_presets_name_their_papers_settings():
    olmo2, gemma2, gemma3, speedrun = (specs.parse(r).fields for r in ("olmo2", "gemma2", "gemma3", "speedrun"))
    assert olmo2 == dict(placement="branch_post", norm="rmsnorm", qk_norm=True, qk_norm_scope="full", z_loss=1e-5)
    assert gemma2 == dict(
        placement="sandwich",
        norm="rmsnorm",
        norm_gain="zero_centred",
        attn_logit_softcap=50.0,
        final_logit_softcap=30.0,
    )
    assert gemma3 == dict(placement="sandwich", norm="rmsnorm", norm_gain="zero_centred", qk_norm=True)
    assert speedrun == dict(
        placement="pre",
        norm="rmsnorm",
        norm_gain="none",
        qk_norm=True,
        embedding_norm=True,
        final_logit_softcap=15.0,
        value_residual=True,
        x0_lambdas=True,
    )
    with pytest.raises(ValueError, match="'zero_gain' and 'no_gain' both set norm_gain"):
        specs.parse("pre:rmsnorm+zero_gain+no_gain")
    with pytest.raises(ValueError, match="zero_gain needs a norm kind with a per-channel gain"):
        specs.parse("pre:scalenorm+zero_gain")
    with pytest.raises(ValueError, match="qk_norm_full: placement 'hybrid' already normalises"):
        specs.parse("hybrid+qk_norm_full")
