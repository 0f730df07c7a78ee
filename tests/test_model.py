"""Model properties the math guarantees: causality, padding invariance, scan == loop, theory setting."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from model_fixtures import model_inputs, scan_twin, tiny_model

import normjax


@pytest.mark.parametrize("placement", ["post", "pre", "hybrid", "rezero", "sandwich"])
@pytest.mark.parametrize("arch", ["decoder", "encoder_decoder"])
def test_decoder_is_causal(placement, arch):
    model = tiny_model(arch=arch, placement=placement, num_layers=2)
    if placement == "rezero":  # open the gates, else the stack is trivially the identity
        for l in range(2):
            model.stacks["decoder"].block(l).gate.set_value(jnp.asarray(0.5))
    inputs = model_inputs(model.cfg)
    ctx = normjax.block_context(model, *inputs, stack="decoder")
    x = jax.random.normal(jax.random.key(0), inputs[-1].shape + (16,))
    J = jax.jit(jax.jacrev(normjax.stack_fn(model, stack="decoder", context=ctx)))(x)  # (B,T,D,B,T,D)
    T = x.shape[1]
    for t in range(T):
        assert float(jnp.abs(J[:, t, :, :, t + 1 :, :]).max(initial=0.0)) == 0.0
        assert float(jnp.abs(J[0, t, :, 0, : t + 1, :]).max()) > 0.0
    # End to end: changing a later token leaves earlier logits bit-identical.
    changed = inputs[-1].at[:, 3].set((inputs[-1][:, 3] + 1) % 23)
    before = model(*inputs[:-1], inputs[-1])
    after = model(*inputs[:-1], changed)
    np.testing.assert_array_equal(before[:, :3], after[:, :3])
    assert not np.allclose(before[:, 3:], after[:, 3:])


def _pad(tokens, mask, value):
    return jnp.where(mask, tokens, value)


@pytest.mark.parametrize("arch", ["decoder", "encoder", "encoder_decoder"])
def test_padding_positions_do_not_change_real_outputs(arch):
    model = tiny_model(arch=arch, placement="pre")
    inputs = model_inputs(model.cfg, length=6)
    mask = jnp.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], bool)
    if arch == "encoder_decoder":
        src, tgt = inputs
        call = lambda s: model(s, tgt, src_mask=mask)
        a, b = call(_pad(src, mask, 0)), call(_pad(src, mask, 7))
        np.testing.assert_array_equal(a, b)  # the decoder never sees padded source tokens
        return
    call = lambda t: model(t, padding_mask=mask)
    a, b = call(_pad(inputs[0], mask, 0)), call(_pad(inputs[0], mask, 7))
    np.testing.assert_array_equal(a[0, :4], b[0, :4])
    np.testing.assert_array_equal(a[1], b[1])
    # Appending padding leaves the real positions unchanged (up to float32 reduction order).
    short = model(inputs[0][:1, :4])
    np.testing.assert_allclose(a[0, :4], short[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("placement", ["post", "pre", "deepnorm", "admin", "rezero", "hybrid"])
@pytest.mark.parametrize("arch", ["decoder", "encoder_decoder"])
def test_scan_equals_loop(placement, arch):
    loop = tiny_model(arch=arch, placement=placement, num_layers=3)
    scan = scan_twin(loop)
    inputs = model_inputs(loop.cfg)
    np.testing.assert_allclose(loop(*inputs), scan(*inputs), rtol=1e-5, atol=1e-5)
    _, p_loop = normjax.probe(loop, *inputs)
    _, p_scan = normjax.probe(scan, *inputs)
    for stack in loop.cfg.stacks:
        for a, b in zip(p_loop[stack].streams, p_scan[stack].streams, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
        assert p_loop[stack].norm_inputs[1].keys() == p_scan[stack].norm_inputs[1].keys()
    for a, b in zip(
        normjax.layer_params(nnx.state(loop, nnx.Param), loop),
        normjax.layer_params(nnx.state(scan, nnx.Param), scan),
        strict=True,
    ):
        assert a.keys() == b.keys()
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])


@pytest.mark.parametrize("scan_layers", [False, True])
def test_remat_changes_nothing_but_memory(scan_layers, x64):
    # float64, so that the comparison is not about float32 rounding in a recomputed order.
    model = tiny_model(placement="pre", num_layers=3, scan_layers=scan_layers, dtype="float64", param_dtype="float64")
    twin = normjax.Transformer(model.cfg.replace(remat=True), rngs=nnx.Rngs(0))
    tokens = model_inputs(model.cfg)[0]

    def grads(m):
        graphdef, params, rest = nnx.split(m, nnx.Param, ...)
        loss = lambda p: nnx.merge(graphdef, p, rest)(tokens).sum()
        return jax.jit(jax.grad(loss))(params)

    for a, b in zip(jax.tree.leaves(grads(model)), jax.tree.leaves(grads(twin)), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_theory_setting_has_uniform_attention():
    model = tiny_model(arch="encoder", theory=True, num_heads=1, placement="post")
    block = model.stacks["encoder"].block(0)
    assert float(jnp.abs(block.attn.branch.query.kernel[...]).max()) == 0.0
    x = jax.random.normal(jax.random.key(0), (2, 5, 16))
    records = {}
    block.apply_sublayer(block.attn, x, normjax.BlockContext(), records)
    attn = block.attn.branch
    uniform = attn.out(attn.value(x).mean(axis=1, keepdims=True).repeat(5, axis=1))
    np.testing.assert_allclose(records["attn.out"], uniform, rtol=1e-5, atol=1e-6)


def test_theory_post_ln_ffn_norm_input_is_three_halves_d():
    # Xiong et al. Lemma 2: E||x + FFN(x)||^2 = 3d/2 for ||x||^2 = d, Gaussian weights N(0, 1/fan_in).
    cfg = normjax.ModelConfig(
        arch="encoder", theory=True, num_heads=1, placement="post", d_model=128, d_ff=512, num_layers=1, vocab_size=8
    )
    ratios = []
    for seed in range(8):
        model = normjax.Transformer(cfg, rngs=nnx.Rngs(seed))
        x = jax.random.normal(jax.random.key(seed), (4, 16, 128))
        _, _, z = _ffn_norm_input(model, x)
        ratios.append(float((z**2).sum(-1).mean() / ((x**2).sum(-1).mean())))
    assert np.mean(ratios) == pytest.approx(1.5, abs=0.05)


def _ffn_norm_input(model, x):
    block = model.stacks["encoder"].block(0)
    records = {}
    y = block.apply_sublayer(block.ffn, x, normjax.BlockContext(), records)
    return x, y, records["ffn.post"]


def test_encode_decode_equals_call():
    model = tiny_model(arch="encoder_decoder", placement="post")
    src, tgt = model_inputs(model.cfg)
    src_mask = jnp.ones(src.shape, bool).at[0, -1].set(False)
    direct = model(src, tgt, src_mask=src_mask)
    staged = model.decode(tgt, model.encode(src, src_mask=src_mask), src_mask=src_mask)
    np.testing.assert_allclose(direct, staged, rtol=1e-6, atol=1e-6)


def test_dropout_only_with_a_key():
    model = tiny_model(placement="pre", dropout=0.3)
    tokens = model_inputs(model.cfg)[0]
    np.testing.assert_array_equal(model(tokens), model(tokens))
    k1, k2 = jax.random.key(1), jax.random.key(2)
    np.testing.assert_array_equal(model(tokens, dropout_rng=k1), model(tokens, dropout_rng=k1))
    assert not np.allclose(model(tokens, dropout_rng=k1), model(tokens, dropout_rng=k2))
    assert not np.allclose(model(tokens), model(tokens, dropout_rng=k1))


@pytest.mark.parametrize("placement", ["pre", "post"])
@pytest.mark.parametrize("scan_layers", [False, True])
def test_probe_streams_chain_through_block_functions(placement, scan_layers):
    model = tiny_model(placement=placement, num_layers=3, scan_layers=scan_layers)
    tokens = model_inputs(model.cfg)[0]
    logits, probes = normjax.probe(model, tokens)
    sp = probes["decoder"]
    assert len(sp.streams) == 4 and len(sp.norm_inputs) == 3
    np.testing.assert_allclose(sp.streams[0], normjax.embed(model, tokens), rtol=1e-6)
    for l in range(3):
        np.testing.assert_allclose(sp.streams[l + 1], normjax.block_fn(model, l)(sp.streams[l]), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(normjax.stack_fn(model, 1)(sp.streams[1]), sp.streams[3], rtol=1e-5, atol=1e-5)
    assert (sp.final_norm_input is not None) == (placement == "pre")
    np.testing.assert_array_equal(logits, model(tokens))


@pytest.mark.parametrize("scan_layers", [False, True])
def test_admin_profiling_sets_accumulated_variance(scan_layers):
    model = tiny_model(arch="encoder_decoder", placement="admin", num_layers=3, scan_layers=scan_layers)
    src, tgt = model_inputs(model.cfg)
    omegas = normjax.profile_admin(model, src, tgt)
    x0 = normjax.embed(model, src, "encoder")
    assert omegas["encoder"][0]["attn"] == pytest.approx(float(jnp.var(x0)) ** 0.5, rel=1e-5)
    flat = [o for block in omegas["decoder"] for o in block.values()]
    assert flat == sorted(flat) and len(flat) == 9  # accumulated variance only grows
    stored = model.stacks["decoder"].block(2).ffn.omega[...]
    np.testing.assert_allclose(stored, omegas["decoder"][2]["ffn"], rtol=1e-6)
    assert bool(jnp.isfinite(model(src, tgt)).all())


def test_float64_parameters(x64):
    model = tiny_model(placement="pre", dtype="float64", param_dtype="float64")
    assert model(model_inputs(model.cfg)[0]).dtype == jnp.float64
