"""Each added or corrected scheme against an independent float64 numpy reference of its published formula."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from model_fixtures import model_inputs, scan_twin, tiny_model

import normjax
from normjax import norms

EPS = 1e-5
H = 2  # heads of the tiny model (d_model 16, d_ff 24)


def _randomize_norms(model, seed=0):
    """Random gamma, beta and head scales, so that the reference sees every norm's own parameters."""
    rng = np.random.default_rng(seed)
    for _, node in nnx.iter_graph(model):
        params = []
        if isinstance(node, norms.LayerNorm):
            params = [node.scale] + ([node.bias] if node.bias is not None else [])
        elif isinstance(node, normjax.layers.Attention) and node.head_scale is not None:
            params = [node.head_scale]
        for p in params:
            v = p[...]
            p.set_value(jnp.asarray(rng.normal(1.0, 0.4, v.shape), v.dtype))


def _ln(z, p, prefix):
    c = z - z.mean(-1, keepdims=True)
    y = c / np.sqrt((c**2).mean(-1, keepdims=True) + EPS) * p[f"{prefix}/scale"]
    return y + p[f"{prefix}/bias"] if f"{prefix}/bias" in p else y


def _lin(x, p, name):
    return x @ p[f"{name}/kernel"] + p[f"{name}/bias"]


def _attention(x, p, qkv=(), inner=False, head_scale=False):
    """Multi-head attention; q/k/v norms per head (width d/H), HeadScale and Sub-LN's norm before W^O."""
    B, T, D = x.shape
    heads = {
        r: _lin(x, p, f"attn/{n}").reshape(B, T, H, D // H)
        for r, n in zip("qkv", ("query", "key", "value"), strict=True)
    }
    for r in qkv:
        heads[r] = _ln(heads[r], p, f"attn/qkv_norm/{r}")
    q, k, v = (heads[r].transpose(0, 2, 1, 3) for r in "qkv")
    logits = q @ k.transpose(0, 1, 3, 2) / np.sqrt(D // H)
    w = np.exp(logits - logits.max(-1, keepdims=True))
    o = ((w / w.sum(-1, keepdims=True)) @ v).transpose(0, 2, 1, 3)  # (B, T, H, D/H)
    if head_scale:
        o = o * p["attn/head_scale"][:, None]
    o = o.reshape(B, T, D)
    return _lin(_ln(o, p, "attn/inner_norm") if inner else o, p, "attn/out")


def _mlp(x, p, inner=False):
    h = np.maximum(_lin(x, p, "ffn/fc1"), 0)
    return _lin(_ln(h, p, "ffn/inner_norm") if inner else h, p, "ffn/fc2")


def _hybrid(x, p):  # Zhuo et al. 2025, official code: x + Attn_QKVnorm(x); u = N(x); u + FFN(u)
    h = x + _attention(x, p, qkv="qkv")
    u = _ln(h, p, "ffn/norm")
    return u + _mlp(u, p)


def _hybrid_first(x, p):  # HybridNorm*'s block 0: Pre-Norm with QKV-norm
    h = x + _attention(_ln(x, p, "attn/norm"), p, qkv="qkv")
    return h + _mlp(_ln(h, p, "ffn/norm"), p)


def _subln(x, p):  # Magneto: x + W^O N(Attn(N(x))), x + W2 N(act(W1 N(x)))
    h = x + _attention(_ln(x, p, "attn/norm"), p, inner=True)
    return h + _mlp(_ln(h, p, "ffn/norm"), p, inner=True)


def _normformer(x, p):  # Shleifer et al. 2021: HeadScale, post-attention LN, LN after the FFN activation
    h = x + _ln(_attention(_ln(x, p, "attn/norm"), p, head_scale=True), p, "attn/norm2")
    return h + _mlp(_ln(h, p, "ffn/norm"), p, inner=True)


def _pre_qk(x, p):  # Dehghani et al. 2023: Pre-LN with per-head norms of q and k
    h = x + _attention(_ln(x, p, "attn/norm"), p, qkv="qk")
    return h + _mlp(_ln(h, p, "ffn/norm"), p)


@pytest.mark.parametrize(
    "fields, reference",
    [
        (dict(placement="hybrid"), _hybrid),
        (dict(placement="hybrid_first"), _hybrid_first),
        (dict(placement="subln"), _subln),
        (dict(placement="normformer"), _normformer),
        (dict(placement="pre", qk_norm=True), _pre_qk),
        (dict(placement="normformer", norm_bias=False), _normformer),
    ],
)
def test_block_matches_published_formula(fields, reference, x64):
    model = tiny_model(arch="encoder", param_dtype="float64", dtype="float64", **fields)
    _randomize_norms(model)
    p = {k: np.asarray(v) for k, v in normjax.layer_params(nnx.state(model, nnx.Param), model, "encoder")[1].items()}
    assert all(not k.endswith("/bias") or "norm" not in k for k in p) or model.cfg.norm_bias
    x = np.random.default_rng(1).normal(size=(2, 5, 16))
    y = np.asarray(normjax.block_fn(model, 1, "encoder")(jnp.asarray(x)))
    np.testing.assert_allclose(y, reference(x, p), rtol=1e-11, atol=1e-11)


def test_hybrid_star_is_pre_qkv_first_then_hybrid():
    cfg = normjax.ModelConfig(num_layers=3, placement="hybrid_star")
    assert cfg.layer_placements("decoder") == ("hybrid_first", "hybrid", "hybrid")
    assert cfg.has_final_norm("decoder")


def test_embedding_norm_normalises_the_embedded_stream(x64):
    model = tiny_model(arch="encoder", embedding_norm=True, param_dtype="float64", dtype="float64")
    _randomize_norms(model)
    emb = model.embedders["encoder"]
    tokens = model_inputs(model.cfg)[0]
    raw = np.asarray(emb.table.embedding[...])[np.asarray(tokens)] * 4.0 + np.asarray(emb.positions[...])[:5]
    p = {"e/scale": np.asarray(emb.norm.scale[...]), "e/bias": np.asarray(emb.norm.bias[...])}
    np.testing.assert_allclose(normjax.embed(model, tokens, "encoder"), _ln(raw, p, "e"), rtol=1e-12)


@pytest.mark.parametrize("arch", ["decoder", "encoder_decoder"])
def test_peri_ln_is_sandwich_with_embedding_norm(arch):
    inputs = model_inputs(tiny_model(arch=arch).cfg)
    peri = tiny_model(arch=arch, placement="peri_ln")
    np.testing.assert_array_equal(
        peri(*inputs), tiny_model(arch=arch, placement="sandwich", embedding_norm=True)(*inputs)
    )
    assert not np.allclose(peri(*inputs), tiny_model(arch=arch, placement="sandwich")(*inputs))


def test_qk_norm_reaches_cross_attention_and_keeps_hybrids_v_norm():
    block = tiny_model(arch="encoder_decoder", placement="post", qk_norm=True).stacks["decoder"].block(0)
    assert set(block.cross.branch.qkv_norm) == {"q", "k"} and set(block.attn.branch.qkv_norm) == {"q", "k"}
    assert block.attn.branch.qkv_norm["q"].scale[...].shape == (8,)  # d_model / num_heads
    hybrid = tiny_model(placement="hybrid", qk_norm=True).stacks["decoder"].block(0)
    assert set(hybrid.attn.branch.qkv_norm) == {"q", "k", "v"}


def test_out_of_range_token_ids_are_rejected_eagerly_naming_the_value():
    model = tiny_model()
    for bad in (-1, 23, 100):
        with pytest.raises(ValueError, match=rf"token id {bad} at index \(0, 1\).*\[0, 23\)"):
            model(jnp.array([[1, bad, 3]]))
    src, tgt = model_inputs(tiny_model(arch="encoder_decoder").cfg)
    with pytest.raises(ValueError, match="token id 23"):
        tiny_model(arch="encoder_decoder")(src, tgt.at[0, 0].set(23))
    with pytest.raises(ValueError, match="integer token ids"):
        model(jnp.ones((1, 3)))
    jax.jit(lambda t: model(t))(jnp.array([[1, 2, 3]]))  # traced ids are not checked (docs/model_api.md)


def _resi_dual_block(x, d, p):  # Xie et al. 2023: per sublayer f = F(x); x = N(x + f); d = d + f
    f = _attention(x, p)
    x, d = _ln(x + f, p, "attn/norm"), d + f
    f = _mlp(x, p)
    return _ln(x + f, p, "ffn/norm"), d + f


def _np_params(model, stack):
    return [
        {k: np.asarray(v) for k, v in layer.items()}
        for layer in normjax.layer_params(nnx.state(model, nnx.Param), model, stack)
    ]


@pytest.mark.parametrize("scan_layers", [False, True])
def test_resi_dual_matches_published_formula(scan_layers, x64):
    """x_0 = d_0 = embeddings; both streams per sublayer; output x_L + N(d_L) before the tied head."""
    model = tiny_model(arch="encoder", placement="resi_dual", num_layers=3, param_dtype="float64", dtype="float64")
    _randomize_norms(model)
    model = scan_twin(model) if scan_layers else model
    tokens = model_inputs(model.cfg)[0]
    x = d = np.asarray(normjax.embed(model, tokens, "encoder"))
    xs, ds = [x], [d]
    for p in _np_params(model, "encoder"):
        x, d = _resi_dual_block(x, d, p)
        xs.append(x), ds.append(d)
    fn = model.stacks["encoder"].final_norm
    out = x + _ln(d, {"f/scale": np.asarray(fn.scale[...]), "f/bias": np.asarray(fn.bias[...])}, "f")
    table = np.asarray(model.embedders["encoder"].table.embedding[...])
    logits, probes = normjax.probe(model, tokens)
    np.testing.assert_allclose(logits, out @ table.T, rtol=1e-11, atol=1e-11)
    sp = probes["encoder"]
    for got, want in zip(sp.streams + sp.dual_streams, xs + ds, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(sp.final_norm_input, ds[-1], rtol=1e-11, atol=1e-11)
    last = normjax.stack_fn(model, 0, 3, "encoder")(normjax.DualStream(jnp.asarray(xs[0]), jnp.asarray(ds[0])))
    np.testing.assert_allclose(last.d, ds[-1], rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("arch", ["decoder", "encoder_decoder"])
def test_resi_dual_outputs_x_plus_normed_dual_stream_in_every_arch(arch, x64):
    model = tiny_model(arch=arch, placement="resi_dual", param_dtype="float64", dtype="float64")
    inputs = model_inputs(model.cfg)
    logits, probes = normjax.probe(model, *inputs)
    table = model.embedders["decoder"].table.embedding[...]
    for stack, sp in probes.items():
        assert len(sp.dual_streams) == len(sp.streams) == 3
        np.testing.assert_array_equal(sp.dual_streams[0], sp.streams[0])  # d_0 = x_0
        for l, b in enumerate(sp.branch_outputs):  # d_{l+1} = d_l + every branch output of block l
            np.testing.assert_allclose(sp.dual_streams[l + 1], sp.dual_streams[l] + sum(b.values()), rtol=1e-12)
        out = sp.streams[-1] + model.stacks[stack].final_norm(sp.final_norm_input)
        if stack == "encoder":
            np.testing.assert_allclose(model.encode(inputs[0]), out, rtol=1e-12)
        else:
            np.testing.assert_allclose(logits, out @ table.T, rtol=1e-12)


def test_resi_dual_block_jacobian_acts_on_the_pair(x64):
    """d' = d + F(x) and x' = N(x + F(x)): d'/d = I, x'/d = 0, d'/x != 0 (what a Post-LN probe would miss)."""
    model = tiny_model(arch="encoder", placement="resi_dual", param_dtype="float64", dtype="float64")
    x = jax.random.normal(jax.random.key(3), (3, 16), jnp.float64)
    J = np.asarray(normjax.jacobian.jacobian(normjax.block_fn(model, 1, "encoder"), normjax.DualStream(x, 2 * x)))
    n = x.size
    assert J.shape == (2 * n, 2 * n)
    np.testing.assert_allclose(J[n:, n:], np.eye(n), atol=1e-14)
    np.testing.assert_allclose(J[:n, n:], 0, atol=1e-14)
    assert np.abs(J[n:, :n]).max() > 0.1


def test_resi_dual_is_never_probed_as_one_stream():
    model = tiny_model(placement="resi_dual")
    x = jax.random.normal(jax.random.key(0), (5, 16))
    for fn in (normjax.block_fn(model, 0), normjax.sublayer_fn(model, 0, "ffn"), normjax.stack_fn(model)):
        with pytest.raises(TypeError, match="ResiDual.*DualStream"):
            fn(x)
        with pytest.raises(TypeError, match="ResiDual.*DualStream"):
            jax.jit(fn)(x)
    with pytest.raises(TypeError, match="one stream"):
        normjax.block_fn(tiny_model(placement="post"), 0)(normjax.DualStream(x, x))
    with pytest.raises(TypeError):  # the pair is no array: jnp does not silently stack the two streams
        jnp.asarray(normjax.DualStream(x, x))
    sp = normjax.probe_stream(model, x[None])  # d_0 = x_0, as the model starts
    assert sp.dual_streams is not None and not np.allclose(sp.final_norm_input, sp.streams[-1])
    assert normjax.probe_stream(tiny_model(placement="post"), x[None]).dual_streams is None


def test_resi_dual_config_refusals():
    with pytest.raises(ValueError, match="mixes stream kinds .resi_dual carries 'dual', post carries 'one'"):
        normjax.ModelConfig(num_layers=2, placement=("resi_dual", "post"))
    with pytest.raises(ValueError, match="final_norm=False"):
        normjax.ModelConfig(placement="resi_dual", final_norm=False)
    model = tiny_model(arch="encoder_decoder", num_layers=1, placement=("resi_dual", "admin"))
    assert model.cfg.has_dual_stream("encoder") and not model.cfg.has_dual_stream("decoder")
    omegas = normjax.profile_admin(model, *model_inputs(model.cfg))  # profiles through the dual encoder
    assert omegas["encoder"] == [{}] and set(omegas["decoder"][0]) == {"attn", "cross", "ffn"}
