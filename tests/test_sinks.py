"""Attention-sink and outlier probes against numpy references and closed forms."""

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from model_fixtures import model_inputs, scan_twin, tiny_model
from test_schemes import H, _lin, _ln, _randomize_norms

import normjax
from normjax.probes import sinks

RNG = np.random.default_rng(0)
MASK_BT = np.array([[True] * 6, [True] * 4 + [False] * 2])


def test_first_token_mass_and_head_logit_max_match_loops():
    mass = RNG.uniform(size=(2, 3, 6))
    logits = RNG.normal(size=(2, 3, 6))
    logits[1, :, 5] = 100.0  # a padded query's logit never counts
    want_mass, want_max = np.zeros(3), np.zeros(3)
    for h in range(3):
        vals = [mass[b, h, t] for b in range(2) for t in range(6) if MASK_BT[b, t]]
        want_mass[h] = sum(vals) / len(vals)
        want_max[h] = max(logits[b, h, t] for b in range(2) for t in range(6) if MASK_BT[b, t])
    np.testing.assert_allclose(sinks.first_token_mass(jnp.asarray(mass), jnp.asarray(MASK_BT)), want_mass, rtol=1e-6)
    np.testing.assert_allclose(sinks.head_logit_max(jnp.asarray(logits), jnp.asarray(MASK_BT)), want_max, rtol=1e-6)
    assert float(sinks.sink_rate(jnp.asarray([[0.1, 0.5], [0.31, 0.3]]))) == 0.5  # > 0.3, Gu et al.'s epsilon


def test_feature_kurtosis_and_max_activation_match_numpy():
    x = RNG.normal(size=(2, 6, 8))
    x[1, 5] = 1e3  # padding: ignored
    real = x[MASK_BT]  # (tokens, D)
    s = np.sqrt((real**2).mean(0))  # per-channel RMS
    want = (s**4).mean() / (s**2).mean() ** 2
    assert float(sinks.feature_kurtosis(jnp.asarray(x), jnp.asarray(MASK_BT))) == pytest.approx(want, rel=1e-5)
    peak, ratio = sinks.max_activation(jnp.asarray(x), jnp.asarray(MASK_BT))
    assert float(peak) == pytest.approx(np.abs(real).max(), rel=1e-6)
    assert float(ratio) == pytest.approx(np.abs(real).max() / np.median(np.abs(real)), rel=1e-5)


def test_feature_kurtosis_limits():
    """1 when every channel has the same RMS, d when one channel carries the whole stream."""
    mask = jnp.ones((1, 4), bool)
    signs = jnp.asarray(RNG.choice([-1.0, 1.0], size=(1, 4, 8)))
    assert float(sinks.feature_kurtosis(signs, mask)) == pytest.approx(1.0, rel=1e-6)
    one_channel = jnp.zeros((1, 4, 8)).at[..., 3].set(2.0)
    assert float(sinks.feature_kurtosis(one_channel, mask)) == pytest.approx(8.0, rel=1e-6)


def _zero_queries(model):
    for _, node in nnx.iter_graph(model):
        if isinstance(node, normjax.layers.Attention):
            node.query.kernel.set_value(jnp.zeros_like(node.query.kernel[...]))
            node.query.bias.set_value(jnp.zeros_like(node.query.bias[...]))


@pytest.mark.parametrize("arch", ["decoder", "encoder"])
def test_uniform_attention_has_the_closed_form_first_token_mass(arch):
    """q = 0 makes every logit 0: each query spreads its mass uniformly over the keys it may see, so the mean
    first-token mass is H_T / T causally (query t sees t + 1 keys) and 1 / T bidirectionally."""
    T = 5
    model = tiny_model(arch=arch)
    _zero_queries(model)
    out = sinks.sink_probes(model, *model_inputs(model.cfg, length=T))[arch]
    want = sum(1 / (t + 1) for t in range(T)) / T if arch == "decoder" else 1 / T
    np.testing.assert_allclose(out["attn"]["first_token_mass"], want, rtol=1e-6)
    np.testing.assert_array_equal(out["attn"]["logit_max"], 0.0)


def test_sink_probes_match_a_float64_reference_of_pre_ln(x64):
    """Every layer of a padded Pre-LN encoder: first-token mass and max logit per head from q, k recomputed in
    numpy from the stream entering the block; the stream statistics from the same streams."""
    model = tiny_model(arch="encoder", num_layers=2, param_dtype="float64", dtype="float64")
    _randomize_norms(model)
    (tokens,) = model_inputs(model.cfg, length=6)
    mask = jnp.asarray(MASK_BT)
    out = sinks.sink_probes(model, tokens, padding_mask=mask)["encoder"]
    _, probes = normjax.probe(model, tokens, padding_mask=mask)
    streams = [np.asarray(x) for x in probes["encoder"].streams]
    params = normjax.layer_params(nnx.state(model, nnx.Param), model, "encoder")
    for l, p in enumerate(params):
        p = {k: np.asarray(v) for k, v in p.items()}
        h = _ln(streams[l], p, "attn/norm")
        q, k = (_lin(h, p, f"attn/{n}").reshape(2, 6, H, 8).transpose(0, 2, 1, 3) for n in ("query", "key"))
        logits = q @ k.transpose(0, 1, 3, 2) / np.sqrt(8)
        logits = np.where(MASK_BT[:, None, None, :], logits, -np.inf)  # padded keys
        probs = np.exp(logits - logits.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        real = MASK_BT[:, None, :]
        want_mass = (probs[..., 0] * real).sum((0, 2)) / real.sum()
        want_max = np.where(real, logits.max(-1), -np.inf).max((0, 2))
        np.testing.assert_allclose(out["attn"]["first_token_mass"][l], want_mass, rtol=1e-10)
        np.testing.assert_allclose(out["attn"]["logit_max"][l], want_max, rtol=1e-10)
    for l, x in enumerate(streams):
        s = np.sqrt((x[MASK_BT] ** 2).mean(0))
        assert out["streams"]["kurtosis"][l] == pytest.approx((s**4).mean() / (s**2).mean() ** 2, rel=1e-10)
        assert out["streams"]["max_abs"][l] == pytest.approx(np.abs(x[MASK_BT]).max(), rel=1e-12)


def test_cross_attention_is_probed_per_head():
    model = tiny_model(arch="encoder_decoder")
    out = sinks.sink_probes(model, *model_inputs(model.cfg))
    assert set(out["decoder"]) == {"streams", "attn", "cross"} and set(out["encoder"]) == {"streams", "attn"}
    for sub in ("attn", "cross"):
        assert out["decoder"][sub]["first_token_mass"].shape == (2, H)
        assert np.all((out["decoder"][sub]["first_token_mass"] > 0) & (out["decoder"][sub]["first_token_mass"] <= 1))


def test_scanned_layers_give_the_same_probes():
    """The per-head statistics travel through nnx.scan's stacked records like the other records."""
    model = tiny_model(arch="encoder_decoder", num_layers=3)
    inputs = model_inputs(model.cfg)
    loop, scanned = sinks.sink_probes(model, *inputs), sinks.sink_probes(scan_twin(model), *inputs)
    for stack, parts in loop.items():
        for part, stats in parts.items():
            for name, value in stats.items():
                np.testing.assert_allclose(scanned[stack][part][name], value, rtol=1e-5, err_msg=f"{stack} {name}")
