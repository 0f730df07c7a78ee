"""QK-Clip (Kimi K2): the per-head rescaling against a numpy reference, untouched heads bit-identical, the metric."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from model_fixtures import model_inputs, tiny_model

import normjax
from normjax.qk_clip import check_config, max_logits_per_head, qk_clip

TAU = 2.0


def _params(model):
    return nnx.split(model, nnx.Param, ...)[1]


def _with_params(model, params):
    graphdef, _, rest = nnx.split(model, nnx.Param, ...)
    return nnx.merge(graphdef, params, rest)


def _sharpen(model, factor=6.0):
    """Scale W_q of head 0 of every attention: its max logit then exceeds head 1's."""
    for _, node in nnx.iter_graph(model):
        if isinstance(node, normjax.layers.Attention):
            w = node.query.kernel[...]
            dh = w.shape[-1] // node.num_heads
            node.query.kernel.set_value(w.at[:, :dh].multiply(factor))


def _reference(a, m_H):
    """numpy: the columns of head h times sqrt(TAU / m_h) where m_h > TAU, else unchanged."""
    gamma = np.where(m_H > TAU, TAU / m_H, 1.0) ** 0.5
    return np.asarray(a) * np.repeat(gamma, a.shape[-1] // m_H.size).astype(np.float32)


@pytest.mark.parametrize("scan_layers", [False, True])
def test_rescaling_matches_numpy_and_leaves_other_heads_bit_identical(scan_layers):
    model = tiny_model(num_layers=2, scan_layers=scan_layers)
    params = _params(model)
    m = {"decoder": {"attn": np.array([[5.0, 1.0], [TAU, 9.0]], np.float32)}}  # one head exactly at tau: untouched
    new = qk_clip(params, m, TAU)
    before = normjax.layer_params(params, model, "decoder")
    after = normjax.layer_params(new, model, "decoder")
    for l in range(2):
        for name, a in before[l].items():
            role = name.split("/")[1]
            if role in ("query", "key"):
                np.testing.assert_allclose(after[l][name], _reference(a, m["decoder"]["attn"][l]), rtol=1e-6)
                for h in np.nonzero(m["decoder"]["attn"][l] <= TAU)[0]:
                    cols = slice(8 * h, 8 * (h + 1))
                    np.testing.assert_array_equal(np.asarray(after[l][name])[..., cols], np.asarray(a)[..., cols])
            else:  # values, output projection, MLP, norms: bit-identical
                np.testing.assert_array_equal(after[l][name], a)


@pytest.mark.parametrize("arch, stack", [("decoder", "decoder"), ("encoder", "encoder")])
def test_after_the_clip_the_batch_max_logit_of_a_clipped_head_is_tau(arch, stack):
    """q, k (with their biases) scale by sqrt(gamma), so the head's logits by gamma = tau / S_max: on the same
    batch the clipped head's max logit is tau and the other head's logits do not move (one layer: a clip in
    layer l changes the stream every later layer reads)."""
    model = tiny_model(arch=arch, num_layers=1)
    _sharpen(model)
    inputs = model_inputs(model.cfg)
    m = max_logits_per_head(model, *inputs)
    (before,) = m[stack]["attn"]
    assert before[0] > before[1]
    tau = float(np.sqrt(before[0] * before[1]))  # between the two heads: head 0 is clipped, head 1 is not
    (after,) = max_logits_per_head(_with_params(model, qk_clip(_params(model), m, tau)), *inputs)[stack]["attn"]
    assert after[0] == pytest.approx(tau, rel=1e-5)
    assert after[1] == before[1]


def test_per_head_metric_agrees_with_the_per_stack_logit_max():
    """Maxed over heads, the per-head metric is the existing per-layer attn_logit_max over real queries."""
    model = tiny_model(num_layers=2)
    (tokens,) = model_inputs(model.cfg, length=6)
    mask = jnp.asarray([[True] * 6, [True] * 3 + [False] * 3])
    m = max_logits_per_head(model, tokens, padding_mask=mask)["decoder"]["attn"]
    _, probes = normjax.probe(model, tokens, padding_mask=mask)
    per_stack = [float(jnp.where(mask, layer["attn"], -jnp.inf).max()) for layer in probes["decoder"].attn_logit_max]
    np.testing.assert_allclose(m.max(axis=1), per_stack, rtol=1e-6)
    assert m.shape == (2, 2)


def test_the_rule_is_a_pure_jittable_function():
    model = tiny_model()
    m = {"decoder": {"attn": jnp.asarray([[5.0, 1.0], [3.0, 9.0]])}}
    eager = qk_clip(_params(model), m, TAU)
    jitted = jax.jit(qk_clip)(_params(model), m, TAU)  # tau traced too
    for a, b in zip(jax.tree.leaves(eager), jax.tree.leaves(jitted), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)


@pytest.mark.parametrize(
    "fields, field",
    [
        (dict(qk_norm=True), "qk_norm"),
        (dict(placement="hybrid"), "placement"),
        (dict(qkv_clip=1.0), "qkv_clip"),
        (dict(attn_logit_softcap=30.0), "attn_logit_softcap"),
    ],
)
def test_configs_where_rescaling_does_not_scale_the_logits_are_refused(fields, field):
    with pytest.raises(ValueError, match=f"ModelConfig.{field}=.*QK-Clip"):
        check_config(normjax.ModelConfig(**fields))
    check_config(normjax.ModelConfig())  # the default passes
