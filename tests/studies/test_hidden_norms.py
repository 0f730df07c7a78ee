"""hidden_norms: results schema at a tiny size, ReZero's stream staying put, logits with and without a final norm;
the X2/X3/S4/R4 rules."""

import ml_collections
import numpy as np

from normjax import studies
from normjax.report import CLAIMS, VERDICTS
from normjax.report.claims import CONSTRUCTION, INCONCLUSIVE
from normjax.studies import runner
from normjax.studies.hidden_norms import measure as hidden_norms
from normjax.studies.judge import judge


def _tiny():
    c = ml_collections.ConfigDict()
    c.placements = ("post", "pre", "sandwich", "rezero", "resi_dual", "pre+embedding_norm")
    c.settings = ("theory", "real")
    c.vocab_size, c.d_model, c.num_heads, c.d_ff, c.num_layers = 31, 32, 2, 64, 4
    c.batch_size, c.seq_len, c.seed, c.num_seeds = 2, 8, 0, 3
    c.final_norm_depths = (1, 4)
    return c


def test_hidden_norms_smoke(tmp_path):
    saved = runner.run_study("hidden_norms", str(tmp_path), _tiny(), hidden_norms.compute, hidden_norms.plot)
    results = saved["results"]
    assert (tmp_path / "hidden_norms" / "stream_norms.png").exists()
    assert set(results["runs"]) == {"theory", "real"}
    for setting in ("theory", "real"):
        for placement in ("post", "pre", "sandwich", "rezero", "resi_dual"):
            assert len(results["runs"][setting][placement]["stream_mean"]) == 5
        # ResiDual: its Post-LN stream is normalised, its dual stream d_l = x_0 + every branch output grows
        dual = np.array(results["runs"][setting]["resi_dual"]["dual_stream_mean"])
        assert len(dual) == 5 and dual[-1] > dual[0]
        assert "dual_stream_mean" not in results["runs"][setting]["post"]
    # The embedding-norm variant: the theory setting feeds x_0 to the blocks, past that norm, so it is left out
    # there; in the real model it normalises x_0: ||x_0||^2/d = var/(var + eps) per token (gamma 1, beta 0).
    assert list(results["skipped_in_theory"]) == ["pre+embedding_norm"]
    assert "pre+embedding_norm" not in results["runs"]["theory"]
    np.testing.assert_allclose(results["runs"]["real"]["pre+embedding_norm"]["stream_mean"][0], 1.0, rtol=1e-3)
    # ReZero at init is the identity: the stream never changes, so its norm is the same at every depth.
    rezero = np.array(results["runs"]["real"]["rezero"]["stream_mean"])
    np.testing.assert_allclose(rezero, rezero[0], rtol=1e-6)
    claims = {row["claim"] for row in judge("hidden_norms", results)}
    assert {"X2", "X3", "S4", "R4"} <= claims <= set(CLAIMS)
    assert all(row["verdict"] in VERDICTS for row in judge("hidden_norms", results))
    x2 = next(r for r in judge("hidden_norms", results) if r["claim"] == "X2")
    assert x2["verdict"] == CONSTRUCTION, x2  # the theory switch is exactly the setting, at any size
    assert (tmp_path / "hidden_norms" / "final_norm.png").exists()
    s4 = [r for r in judge("hidden_norms", results) if r["claim"] == "S4"]
    assert [r["prediction"].split(",")[0] for r in s4] == ["growth half", "final-norm half"], s4
    assert np.array(results["final_norm"]["without"]["logit_rms"]).shape == (3, 2)  # (seeds, depths)
    pre = results["runs"]["real"]["pre"]
    assert np.array(pre["stream"]).shape == (3, 5) and len(pre["stream_growth"]["slope"]) == 3  # per seed
    # A rerun with the same config reuses the results instead of recomputing.
    again = runner.run_study("hidden_norms", str(tmp_path), _tiny(), hidden_norms.compute, hidden_norms.plot)
    assert again["created"] == saved["created"]


def _synthetic(post_z, pre_stream, sandwich_stream=None) -> dict:
    """Theory-setting results from per-seed Post-LN FFN LN inputs (S, L) and Pre-LN streams (S, L + 1)."""
    from normjax.studies.encoder_models import lemma2_bounds
    from normjax.studies.hidden_norms.measure import _growth

    runs = {
        "post": {"norm_inputs": {"ffn.post": {"values": post_z}}},
        "pre": {"stream": pre_stream, "stream_growth": _growth(pre_stream)},
    }
    if sandwich_stream is not None:
        runs["sandwich"] = {"stream": sandwich_stream, "stream_growth": _growth(sandwich_stream)}
    return {"bounds": lemma2_bounds(len(pre_stream[0]) - 1), "runs": {"theory": runs}}


def _rows(results):
    return {row["claim"]: row for row in judge("hidden_norms", results)}


L = np.arange(9)
PRE = [1 + L * 1.0 + 0.01 * s for s in range(3)]  # inside (1 + l/2, 1 + 3l/2), linear, grows x9


def test_x3_rule_clean_pass_failure_and_noise():
    assert _rows(_synthetic([[1.5] * 8, [1.51] * 8, [1.49] * 8], PRE))["X3"]["verdict"] == "holds"
    below = [1 + L * 0.2 + 0.01 * s for s in range(3)]  # under the lower bound 1 + l/2
    assert _rows(_synthetic([[1.0] * 8, [1.02] * 8, [0.98] * 8], below))["X3"]["verdict"] == "does not hold"
    # Post-LN's mean 1.55 is within 1.5 +- 0.1, but the seeds scatter beyond the band: inconclusive, not a failure
    noisy = _rows(_synthetic([[1.4] * 8, [1.5] * 8, [1.75] * 8], PRE))["X3"]
    assert noisy["verdict"] == INCONCLUSIVE, noisy


def test_s4_r4_rules_clean_pass_failure_and_noise():
    post = [[1.5] * 8] * 3
    flat = [np.ones(9) + 0.001 * s for s in range(3)]  # no growth: ratio 1
    rows = _rows(_synthetic(post, PRE, sandwich_stream=[1 + 2 * L + 0.1 * s for s in range(3)]))
    assert rows["S4"]["verdict"] == rows["R4"]["verdict"] == "holds"
    assert _rows(_synthetic(post, flat))["S4"]["verdict"] == "partly holds"  # linear (r^2 1) but no growth
    exponential = [np.exp(L * (0.5 + 0.01 * s)) for s in range(3)]
    assert _rows(_synthetic(post, exponential))["S4"]["verdict"] == "partly holds"  # grows, but not linearly
    # the growth ratio's mean (2.7) is above 2, but one seed barely grows: the interval straddles 2
    noisy = [1 + L * g for g in (0.3, 0.3, 0.025)]
    assert _rows(_synthetic(post, noisy))["S4"]["numbers"]["ratio_last_first"] > 2
    assert _rows(_synthetic(post, noisy))["S4"]["verdict"] == INCONCLUSIVE


def test_rules_need_three_seeds():
    rows = _rows(_synthetic([[1.5] * 8] * 2, PRE[:2], sandwich_stream=PRE[:2]))
    assert {rows[c]["verdict"] for c in ("X3", "S4", "R4")} == {"not testable at this scale"}


def test_every_preset_validates_with_three_seeds_and_another_seed():
    from normjax.report.rules import MIN_SEEDS
    from normjax.studies import schema as schemas
    from normjax.studies.hidden_norms import config as presets
    from normjax.studies.seeds import seeds

    for name in ("quick", "standard", "paper"):
        config = presets.get_config(name)
        assert config.num_seeds >= MIN_SEEDS, name
        config.seed = 1  # --config.seed=1: seeds 1 .. num_seeds
        schemas.validate(studies.get("hidden_norms"), config)
        assert seeds(config) == list(range(1, 1 + config.num_seeds))


def test_final_norm_arms_differ_in_the_norm_only():
    """The "without" arm is exactly the model built with final_norm=False: same weights, same batch."""
    import dataclasses

    import jax
    from flax import nnx

    import normjax
    from normjax.studies.hidden_norms import final_norm

    c = _tiny()
    got = final_norm.measure_head(c, 3, seed=2)
    model = normjax.Transformer(final_norm.head_config(c, 3, final_norm=False), rngs=nnx.Rngs(2))
    assert model.stacks["encoder"].final_norm is None and model.head is not None  # no final norm, untied head
    tokens = jax.random.randint(jax.random.key(1002), (c.batch_size, c.seq_len), 0, c.vocab_size)
    logits, probes = normjax.probe(model, tokens)
    want = final_norm._stats(logits, probes["encoder"].streams[-1])
    for key in final_norm.QUANTITIES:
        np.testing.assert_allclose(got["without"][key], want[key], rtol=1e-6)
    assert dataclasses.replace(final_norm.head_config(c, 3), final_norm=False) == model.cfg


def test_logits_grow_with_depth_without_a_final_norm_and_not_with_one():
    """logits = h W, so rms(logits)^2 = mean_t h_t^T (W W^T / V) h_t lies within [lambda_min, lambda_max] / V of
    W W^T times mean ||h||^2. With a final norm ||h||^2 = d var/(var + eps) at every depth: a band that does not
    depend on L. Without it h = x_L, whose ||x_L||^2 grows with depth in Pre-LN, and the logits grow with it."""
    from flax import nnx

    import normjax
    from normjax.studies.hidden_norms import final_norm

    c = _tiny()
    c.vocab_size, c.batch_size, c.seq_len = 4096, 4, 16  # V >> d: W W^T / V close to sigma^2 I
    depths, stats, bands = (1, 12), {}, {}
    for depth in depths:
        stats[depth] = final_norm.measure_head(c, depth, seed=0)
        model = normjax.Transformer(final_norm.head_config(c, depth), rngs=nnx.Rngs(0))
        eig = np.linalg.eigvalsh(np.asarray(model.head.kernel[...], np.float64) @ np.asarray(model.head.kernel[...]).T)
        bands[depth] = eig.min() / c.vocab_size, eig.max() / c.vocab_size
    s1, s12 = (stats[d]["with"]["stream_ms"] for d in depths)
    assert s12 > 2 * s1  # the stream grows with depth (Lemma 2's lower bound 1 + l/2 in expectation)
    for depth in depths:
        lo, hi = bands[depth]
        with_ms, without_ms = stats[depth]["with"]["logit_rms"] ** 2, stats[depth]["without"]["logit_rms"] ** 2
        stream = stats[depth]["without"]["stream_ms"] * c.d_model  # mean ||x_L||^2
        assert lo * stream * (1 - 1e-5) <= without_ms <= hi * stream * (1 + 1e-5)
        assert lo * c.d_model * (1 - 1e-3) <= with_ms <= hi * c.d_model * (1 + 1e-5)  # ||N(x)||^2 <= d
    # hence: without a final norm rms^2 grows at least by s12 / s1 times the spectra's spread; with it, it stays
    # inside one band [min lo, max hi] d at both depths
    spread = max(b[1] for b in bands.values()) / min(b[0] for b in bands.values())
    without = [stats[d]["without"]["logit_rms"] ** 2 for d in depths]
    assert without[1] / without[0] >= (s12 / s1) / spread > 1
    with_ = [stats[d]["with"]["logit_rms"] ** 2 for d in depths]
    assert 1 / spread <= with_[1] / with_[0] <= spread < 2


LN_V = float(np.log(1000))


def _final_norm(without_rms, without_loss, with_rms, with_loss, depths=(1, 3, 6, 12, 24), ln_v=LN_V):
    """Synthetic final_norm results: per arm (seeds, depths) logit rms and init loss."""
    arm = lambda rms, loss: {"logit_rms": np.array(rms, float), "loss": np.array(loss, float)}  # noqa: E731
    return {
        "final_norm": {
            "depths": list(depths),
            "ln_vocab": float(ln_v),
            "without": arm(without_rms, without_loss),
            "with": arm(with_rms, with_loss),
        }
    }


def test_s4_final_norm_rule_supported_contradicted_inconclusive():
    from normjax.studies.hidden_norms.verdicts import final_norm_half

    D, ln_v = np.array([1, 3, 6, 12, 24]), LN_V
    grows = [0.67 * D ** (0.4 + 0.01 * s) for s in range(3)]  # exponent 0.4, ratio 3.6
    grows_loss = [ln_v + 0.1 + 0.5 * D**0.5 + 0.05 * s for s in range(3)]  # 2.6 nats over ln V at L 24
    flat = [0.475 * (1 + 0.005 * s) * D**0.0 for s in range(3)]
    flat_loss = [ln_v + 0.11 + 0.001 * s + 0 * D for s in range(3)]
    verdict = lambda *arms: final_norm_half(_final_norm(*arms))[0]["verdict"]  # noqa: E731
    assert verdict(grows, grows_loss, flat, flat_loss) == "holds"
    shrinks = [0.475 * D ** (-0.01 - 0.001 * s) for s in range(3)]  # no growth without the norm, growth with it
    assert verdict(shrinks, flat_loss, grows, grows_loss) == "does not hold"
    assert verdict(grows, grows_loss, grows, grows_loss) == "partly holds"  # the norm does not stop the growth
    # with the norm, one seed's deep/shallow rms ratio is 1.15: the ratios' interval straddles 1.1
    noisy = [0.475 * np.r_[1, 1, 1, 1, r] for r in (1.0, 1.15, 0.95)]
    row = final_norm_half(_final_norm(grows, grows_loss, noisy, flat_loss))[0]
    assert row["verdict"] == INCONCLUSIVE and 1 / 1.1 < row["numbers"]["rms_ratio_with"] < 1.1, row
    # fewer than three seeds: not testable
    assert final_norm_half(_final_norm(grows[:2], grows_loss[:2], flat[:2], flat_loss[:2]))[0]["verdict"] == (
        "not testable at this scale"
    )
