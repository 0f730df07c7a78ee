"""The per-layer LN-input rms, attention logit maxima and output logit statistics of `steps.diagnostics`,
against plain jax.numpy recomputations from the model's parameters."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from model_fixtures import scan_twin, tiny_model

import normjax
from normjax.blocks import BlockContext
from normjax.layers import Attention, attention_bias
from normjax.train import steps

B, T = 3, 6


def _mask(lengths, length):
    return jnp.arange(length)[None, :] < jnp.asarray(lengths)[:, None]


def _lm_batch(vocab, seed=0):
    tokens = jax.random.randint(jax.random.key(seed), (B, T), 1, vocab)
    mask = _mask([T, 4, 2], T)
    return {"tokens": tokens, "targets": jnp.roll(tokens, -1, axis=1), "mask": mask}


def _s2s_batch(vocab, seed=0):
    k1, k2 = jax.random.split(jax.random.key(seed))
    src = jax.random.randint(k1, (B, T), 1, vocab)
    tgt = jax.random.randint(k2, (B, T + 1), 1, vocab)
    return {
        "src": src,
        "tgt_in": tgt,
        "tgt_out": jnp.roll(tgt, -1, axis=1),
        "src_mask": _mask([T, 3, 5], T),
        "tgt_mask": _mask([4, T + 1, 2], T + 1),
    }


def _diag(model, task, batch):
    graphdef, params, consts = nnx.split(model, nnx.Param, ...)
    return jax.jit(steps.diagnostics, static_argnums=(0, 1))(graphdef, task, params, consts, batch)


def _rms(x, w_BT):
    x = np.asarray(x, np.float64).reshape(*x.shape[:2], -1)
    r = np.linalg.norm(x, axis=-1) / np.sqrt(x.shape[-1])
    w = np.asarray(w_BT, np.float64)
    return (r * w).sum() / max(w.sum(), 1.0)


def _logit_max(params, h_q, h_kv, heads, q_mask, k_mask, causal):
    """Largest scaled q.k over heads, real queries and allowed keys, from the attention's raw weights (numpy)."""

    def proj(name, h):
        y = np.asarray(h, np.float64) @ np.asarray(params[f"{name}/kernel"], np.float64)
        return y + np.asarray(params[f"{name}/bias"], np.float64)

    q, k = proj("query", h_q), proj("key", h_kv)
    Bq, Tq, D = q.shape
    S = k.shape[1]
    dk = D // heads
    q, k = q.reshape(Bq, Tq, heads, dk), k.reshape(Bq, S, heads, dk)
    logits = np.einsum("bthk,bshk->bhts", q, k) / np.sqrt(dk)
    allowed = np.asarray(q_mask)[:, None, :, None] & np.asarray(k_mask)[:, None, None, :]
    if causal:
        allowed = allowed & np.tril(np.ones((Tq, S), bool))[None, None]
    assert logits[~np.broadcast_to(allowed, logits.shape)].size  # some pairs are masked out
    return logits[np.broadcast_to(allowed, logits.shape)].max(), logits.max()


def _check_output_logits(diag, logits, w_BT):
    lg = np.asarray(logits, np.float64)
    w = np.asarray(w_BT, bool)
    np.testing.assert_allclose(diag["output_logit_mean"], lg[w].mean(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(diag["output_logit_max"], lg[w].max(), rtol=1e-6)


def _check_rms(diag, probes, stack, masks, L):
    sp = probes[stack]
    ln = np.asarray(diag[f"ln_input_rms/{stack}"])
    assert ln.shape == (L,)
    for l, sites in enumerate(sp.norm_inputs):
        assert not any(k.endswith("logit_max") for k in sites)  # not a norm site
        want = max(
            [0.0] + [_rms(x, masks["encoder" if n in ("cross.k", "cross.v") else stack]) for n, x in sites.items()]
        )
        np.testing.assert_allclose(ln[l], want, rtol=1e-5)
    final = 0.0 if sp.final_norm_input is None else _rms(sp.final_norm_input, masks[stack])
    np.testing.assert_allclose(diag[f"norm_input_rms/{stack}"], max(ln.max(), final), rtol=1e-6)


@pytest.mark.parametrize("scan", [False, True])
def test_decoder_diagnostics_match_a_numpy_recomputation(scan):
    model = tiny_model(arch="decoder", placement="pre", num_layers=2)
    batch = _lm_batch(model.cfg.vocab_size)
    diag = _diag(scan_twin(model) if scan else model, "lm", batch)
    logits, probes = normjax.probe(model, batch["tokens"], padding_mask=batch["mask"])
    mask = batch["mask"]
    _check_rms(diag, probes, "decoder", {"decoder": mask}, 2)
    _check_output_logits(diag, logits, mask)
    got = np.asarray(diag["attn_logit_max/decoder"])
    assert got.shape == (2,)
    st = model.stacks["decoder"]
    layers = normjax.layer_params(nnx.state(model, nnx.Param), model, "decoder")
    for l in range(2):
        h = st.block(l).attn.norm(probes["decoder"].norm_inputs[l]["attn.pre"])  # the branch input N(x)
        attn = {k.removeprefix("attn/"): v for k, v in layers[l].items() if k.startswith("attn/")}
        want, unmasked = _logit_max(attn, h, h, model.cfg.num_heads, mask, mask, causal=True)
        np.testing.assert_allclose(got[l], want, rtol=1e-5)
        assert not np.isclose(got[l], unmasked) or want == unmasked


def test_encoder_decoder_diagnostics_match_a_numpy_recomputation():
    model = tiny_model(arch="encoder_decoder", placement="post", num_layers=2)
    batch = _s2s_batch(model.cfg.vocab_size)
    diag = _diag(model, "seq2seq", batch)
    src, tgt, sm, tm = batch["src"], batch["tgt_in"], batch["src_mask"], batch["tgt_mask"]
    logits, probes = normjax.probe(model, src, tgt, src_mask=sm, tgt_mask=tm)
    masks = {"encoder": sm, "decoder": tm}
    for stack in ("encoder", "decoder"):
        _check_rms(diag, probes, stack, masks, 2)
    _check_output_logits(diag, logits, tm)
    memory = model.encode(src, sm)
    H = model.cfg.num_heads
    for stack in ("encoder", "decoder"):
        st, sp = model.stacks[stack], probes[stack]
        layers = normjax.layer_params(nnx.state(model, nnx.Param), model, stack)
        m = masks[stack]
        for l in range(2):
            attn = {k.removeprefix("attn/"): v for k, v in layers[l].items() if k.startswith("attn/")}
            h = sp.streams[l]  # Post-LN: attention reads the block input
            want, _ = _logit_max(attn, h, h, H, m, m, causal=stack == "decoder")
            np.testing.assert_allclose(diag[f"attn_logit_max/{stack}"][l], want, rtol=1e-5)
            if stack == "decoder":
                cross = {k.removeprefix("cross/"): v for k, v in layers[l].items() if k.startswith("cross/")}
                h1 = st.block(l).attn.norm(sp.norm_inputs[l]["attn.post"])  # the stream after self-attention
                want, _ = _logit_max(cross, h1, memory, H, m, sm, causal=False)
                np.testing.assert_allclose(diag["cross_logit_max/decoder"][l], want, rtol=1e-5)
    assert "cross_logit_max/encoder" not in diag
    for k, v in diag.items():
        assert np.all(np.isfinite(v)), k


def test_masked_logits_are_excluded_even_when_huge():
    """H = 1, q = a-part of x, k = b-part: logit(t, s) = a_t . b_s / sqrt(D). Huge logits sit at a causally
    masked pair (0, T-1) and at a padded key; the maximum over allowed pairs ignores them."""
    D, Tn = 8, 5
    attn = Attention(
        D,
        1,
        {n: 1.0 for n in ("query", "key", "value", "out")},
        init_fn=lambda g: nnx.initializers.zeros,
        rngs=nnx.Rngs(0),
    )
    wq, wk = np.zeros((D, D)), np.zeros((D, D))
    wq[np.arange(4), np.arange(4)] = 1.0
    wk[4 + np.arange(4), np.arange(4)] = 1.0
    attn.query.kernel.set_value(jnp.asarray(wq, jnp.float32))
    attn.key.kernel.set_value(jnp.asarray(wk, jnp.float32))
    x = np.asarray(jax.random.normal(jax.random.key(1), (2, Tn, D)), np.float64) * 0.1
    x[:, 1:, 0] = 0.0  # only query 0 has an e_1 component
    x[:, 0, 0] = 1.0
    x[0, Tn - 1, 4] = 1e4  # b_{T-1} huge along e_1: logit(0, T-1), causally masked
    x[1, 3, 4] = 1e4  # sequence 1 has 3 real tokens: key 3 is padding
    x = jnp.asarray(x, jnp.float32)
    key_mask = jnp.asarray([[True] * Tn, [True, True, True, False, False]])
    bias = attention_bias(key_mask, Tn, Tn, causal=True, dtype=jnp.float32)
    seen = []
    attn(x, x, bias, record=lambda r, z: z, logit_stat=seen.append)
    (m_BT,) = seen
    assert m_BT.shape == (2, Tn)
    xn = np.asarray(x, np.float64)
    logits = np.einsum("btk,bsk->bts", xn[..., :4], xn[..., 4:]) / np.sqrt(D)
    allowed = np.asarray(key_mask)[:, None, :] & np.tril(np.ones((Tn, Tn), bool))[None]
    want = np.where(allowed, logits, -np.inf).max(-1)
    assert logits.max() > 1e3 and want.max() < 10  # the huge entries are all masked out
    np.testing.assert_allclose(m_BT, want, rtol=1e-4, atol=1e-5)
    # no logit_stat: nothing recorded, same output
    y1 = attn(x, x, bias, record=lambda r, z: z)
    y2 = attn(x, x, bias, record=lambda r, z: z, logit_stat=lambda m: None)
    np.testing.assert_array_equal(y1, y2)


def test_padded_queries_are_excluded():
    """A padded query row can attend to real keys; its logits must not reach attn_logit_max."""
    model = tiny_model(arch="decoder", placement="pre", num_layers=1)
    batch = _lm_batch(model.cfg.vocab_size)
    _, probes = normjax.probe(model, batch["tokens"], padding_mask=batch["mask"])
    m_BT = np.asarray(probes["decoder"].attn_logit_max[0]["attn"])
    assert m_BT.shape == (B, T) and np.all(np.isfinite(m_BT))  # every query (padded too) has an allowed key
    diag = _diag(model, "lm", batch)
    np.testing.assert_allclose(diag["attn_logit_max/decoder"][0], m_BT[np.asarray(batch["mask"])].max(), rtol=1e-6)


def test_record_false_adds_nothing():
    model = tiny_model(arch="decoder", placement="pre", num_layers=2)
    tokens = _lm_batch(model.cfg.vocab_size)["tokens"]
    block = model.stacks["decoder"].block(0)
    x = model.embedders["decoder"](tokens)
    ctx = BlockContext(self_bias=attention_bias(None, T, T, causal=True, dtype=jnp.float32))
    _, recs = block(x, ctx)
    assert not any(k.endswith(".logit_max") for k in recs)
    _, recs = block(x, ctx, logit_stats=True)
    assert {k for k in recs if k.endswith(".logit_max")} == {"attn.logit_max"}
    # forward without record: the masked maxima are not in the program (softmax's own max only)
    plain = str(jax.make_jaxpr(lambda t: model.forward(t)[0])(tokens)).count("reduce_max")
    rec = str(jax.make_jaxpr(lambda t: model.forward(t, record=True)[1])(tokens)).count("reduce_max")
    assert plain == 2 and rec > plain


@pytest.mark.parametrize("placement", ["resi_dual", "ngpt", "mhc", "post"])
@pytest.mark.parametrize("scan", [False, True])
def test_other_placements_and_scan_agree(placement, scan):
    model = tiny_model(arch="decoder", placement=placement, num_layers=2)
    batch = _lm_batch(model.cfg.vocab_size)
    diag = _diag(model, "lm", batch)
    if scan:
        twin = _diag(scan_twin(model), "lm", batch)
        for k in diag:
            np.testing.assert_allclose(twin[k], diag[k], rtol=2e-5, atol=1e-6, err_msg=k)
    _, probes = normjax.probe(model, batch["tokens"], padding_mask=batch["mask"])
    m_BT = [np.asarray(b["attn"]) for b in probes["decoder"].attn_logit_max]
    want = [m[np.asarray(batch["mask"])].max() for m in m_BT]
    np.testing.assert_allclose(diag["attn_logit_max/decoder"], want, rtol=1e-6)
    assert diag["ln_input_rms/decoder"].shape == (2,)
