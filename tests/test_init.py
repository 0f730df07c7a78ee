"""Paper constants (DeepNorm, Admin, T-Fixup, GPT-2) and that the model's init uses them."""

import math

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from model_fixtures import tiny_model

import normjax
from normjax.init import cait_layerscale_init


def test_deepnorm_constants_match_the_paper():
    # Encoder-only N = 6 (Wang et al. 2022, Table 1): alpha = 12^(1/4), beta = 48^(-1/4).
    assert normjax.deepnorm_constants("encoder", "encoder", 6, 0) == pytest.approx((1.8612, 0.3799), abs=1e-4)
    assert normjax.deepnorm_constants("decoder", "decoder", 0, 12) == pytest.approx((24**0.25, 96**-0.25))
    N, M = 6, 6
    enc = normjax.deepnorm_constants("encoder_decoder", "encoder", N, M)
    dec = normjax.deepnorm_constants("encoder_decoder", "decoder", N, M)
    assert enc == pytest.approx((0.81 * (N**4 * M) ** (1 / 16), 0.87 * (N**4 * M) ** (-1 / 16)))
    assert enc == pytest.approx((1.4179, 0.4970), abs=1e-4)
    assert dec == pytest.approx((18**0.25, 72**-0.25))
    assert dec == pytest.approx((2.0598, 0.3433), abs=1e-4)


def test_admin_closed_form_omega():
    for n, omega in ((12, 2.017), (24, 2.601), (48, 3.405)):
        assert normjax.admin_omega(n) == pytest.approx(omega, abs=1e-3)


def test_tfixup_and_gpt2_factors():
    # layer6ai-labs/T-Fixup: encoder layers 0.67 N^(-1/4), decoder layers (9M)^(-1/4), embeddings (9L)^(-1/4).
    assert normjax.tfixup_scale("encoder_decoder", "encoder", 6, 6) == pytest.approx(0.67 * 6**-0.25)
    assert normjax.tfixup_scale("encoder_decoder", "decoder", 6, 6) == pytest.approx(54**-0.25)
    assert normjax.tfixup_scale("encoder", "encoder", 6, 0) == pytest.approx(0.67 * 6**-0.25)
    assert normjax.tfixup_scale("decoder", "decoder", 0, 6) == pytest.approx(54**-0.25)  # not the encoder rule
    for arch, stack, n, m in (("encoder", "encoder", 6, 0), ("decoder", "decoder", 0, 6)):
        assert normjax.tfixup_embedding_scale(arch, stack, n, m) == pytest.approx(0.3689, abs=1e-4)  # 54^(-1/4)
    assert normjax.tfixup_embedding_scale("encoder_decoder", "encoder", 12, 6) == pytest.approx(108**-0.25)
    assert normjax.gpt2_scale(24) == pytest.approx(1 / math.sqrt(24))
    assert [cait_layerscale_init(d) for d in (12, 24, 36)] == [0.1, 1e-5, 1e-6]


def _std(block, path):
    module = block
    for name in path.split("/"):
        module = getattr(module, name)
    return float(jnp.std(module.kernel[...]))


WIDE = dict(vocab_size=11, d_model=256, num_heads=4, d_ff=256, num_layers=6)
XAVIER = math.sqrt(2 / (256 + 256))


def test_deepnorm_init_scales_ffn_value_out_but_not_query_key():
    model = normjax.Transformer(normjax.ModelConfig(arch="encoder", placement="deepnorm", **WIDE), rngs=nnx.Rngs(0))
    alpha, beta = normjax.deepnorm_constants("encoder", "encoder", 6, 0)
    block = model.stacks["encoder"].block(3)
    assert block.attn.alpha == pytest.approx(alpha) and block.ffn.alpha == pytest.approx(alpha)
    for path in ("attn/branch/value", "attn/branch/out", "ffn/branch/fc1", "ffn/branch/fc2"):
        assert _std(block, path) == pytest.approx(beta * XAVIER, rel=0.02), path
    for path in ("attn/branch/query", "attn/branch/key"):
        assert _std(block, path) == pytest.approx(XAVIER, rel=0.02), path


def test_encoder_decoder_deepnorm_uses_each_halfs_constants():
    cfg = normjax.ModelConfig(arch="encoder_decoder", placement="deepnorm", **WIDE)
    model = normjax.Transformer(cfg, rngs=nnx.Rngs(0))
    for stack in ("encoder", "decoder"):
        alpha, beta = normjax.deepnorm_constants("encoder_decoder", stack, 6, 6)
        block = model.stacks[stack].block(0)
        assert block.ffn.alpha == pytest.approx(alpha)
        assert _std(block, "ffn/branch/fc2") == pytest.approx(beta * XAVIER, rel=0.02)
    assert _std(model.stacks["decoder"].block(0), "cross/branch/value") == pytest.approx(
        normjax.deepnorm_constants("encoder_decoder", "decoder", 6, 6)[1] * XAVIER, rel=0.02
    )


@pytest.mark.parametrize("arch", ["decoder", "encoder", "encoder_decoder"])
def test_tfixup_scales_branches_and_embeddings(arch):
    model = normjax.Transformer(normjax.ModelConfig(arch=arch, placement="tfixup", **WIDE), rngs=nnx.Rngs(0))
    for stack in model.cfg.stacks:
        layer = 0.67 * 6**-0.25 if stack == "encoder" else 54**-0.25
        block = model.stacks[stack].block(0)
        for path in ("ffn/branch/fc1", "ffn/branch/fc2", "attn/branch/value", "attn/branch/out"):
            assert _std(block, path) == pytest.approx(layer * XAVIER, rel=0.02), path
        assert _std(block, "attn/branch/query") == pytest.approx(XAVIER, rel=0.02)
        table = model.embedders[stack].table.embedding[...]
        assert float(jnp.std(table)) == pytest.approx(54**-0.25 / 16, rel=0.05)  # (9 * 6)^(-1/4) d^-1/2


@pytest.mark.parametrize("arch", ["decoder", "encoder", "encoder_decoder"])
def test_subln_gain_follows_torchscale(arch):
    model = normjax.Transformer(normjax.ModelConfig(arch=arch, placement="subln", **WIDE), rngs=nnx.Rngs(0))
    for stack in model.cfg.stacks:
        gain = {  # torchscale architecture/encoder.py 254-270, decoder.py 300-314, N = M = 6
            "decoder": math.sqrt(math.log(12)),
            "encoder": math.sqrt(math.log(12)),
            "encoder_decoder": math.sqrt(math.log(18) * math.log(12) / 3 if stack == "encoder" else math.log(18)),
        }[arch]
        block = model.stacks[stack].block(1)
        for path in ("ffn/branch/fc1", "ffn/branch/fc2", "attn/branch/value", "attn/branch/out"):
            assert _std(block, path) == pytest.approx(gain * XAVIER, rel=0.02), path
        if block.cross is not None:  # torchscale leaves encoder_attn unscaled
            assert _std(block, "cross/branch/value") == pytest.approx(XAVIER, rel=0.02)


def test_gpt2_scaling_touches_only_the_projections_into_the_stream():
    model = normjax.Transformer(normjax.ModelConfig(placement="pre", branch_scaling="gpt2", **WIDE), rngs=nnx.Rngs(0))
    block, scale = model.stacks["decoder"].block(0), 1 / math.sqrt(12)
    assert _std(block, "attn/branch/out") == pytest.approx(scale * XAVIER, rel=0.02)
    assert _std(block, "ffn/branch/fc2") == pytest.approx(scale * XAVIER, rel=0.02)
    assert _std(block, "ffn/branch/fc1") == pytest.approx(XAVIER, rel=0.02)


def test_admin_omega_init_is_closed_form_per_channel():
    model = tiny_model(placement="admin", num_layers=6)
    omega = model.stacks["decoder"].block(2).ffn.omega[...]
    np.testing.assert_allclose(omega, normjax.admin_omega(12), rtol=1e-6)


def test_rezero_and_skipinit_gates():
    shared = tiny_model(placement="rezero").stacks["decoder"].block(0)
    assert shared.gate is not None and shared.attn.gate is None and float(shared.gate[...]) == 0.0
    per_sub = tiny_model(placement="rezero", rezero_per_sublayer=True).stacks["decoder"].block(0)
    assert per_sub.gate is None and float(per_sub.ffn.gate[...]) == 0.0
    skip = tiny_model(placement="skipinit").stacks["decoder"].block(0)
    assert skip.attn.gate[...].shape == () and skip.attn.norm is None
    scale = tiny_model(placement="layerscale").stacks["decoder"].block(0)
    assert scale.ffn.gate[...].shape == (16,) and float(scale.ffn.gate[0]) == pytest.approx(0.1)
