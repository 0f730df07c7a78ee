"""grad_norms_at_init at a tiny size: results schema, verdict rows, the gradient probe's metrics."""

import jax
import ml_collections
import numpy as np
import optax
import pytest
from flax import nnx

import normjax
from normjax import studies
from normjax.probes import param_probes
from normjax.report import CLAIMS, VERDICTS
from normjax.report.claims import INCONCLUSIVE
from normjax.studies import ffn_gradients as probe
from normjax.studies import runner
from normjax.studies import schema as schemas
from normjax.studies.grad_norms_at_init import config as presets
from normjax.studies.grad_norms_at_init import measure as grad_norms_at_init
from normjax.studies.grad_norms_at_init.verdicts import KERNEL
from normjax.studies.judge import judge
from normjax.train import batching, data_gettext, steps
from normjax.train.data_gettext import CorpusSpec, build_corpus
from tests.train.test_gettext_task import write_catalogs

TINY = dict(vocab_size=31, d_model=16, num_heads=2, d_ff=32, num_layers=1, max_len=8)


def _tiny():
    c = ml_collections.ConfigDict()
    c.archs = ("encoder_decoder",)  # every compile costs seconds: one model per placement
    c.placements = ("post", "pre", "resi_dual", "pre:scalenorm")
    c.vocab_size, c.d_model, c.num_heads, c.d_ff, c.num_layers = 31, 16, 2, 32, 3
    c.batch_size, c.seq_len, c.num_batches = 2, 6, 3
    c.seed, c.num_seeds = 1, 3  # not seed 0: --config.seed=1 must work
    c.deep_layers, c.deep_placements, c.deep_num_batches = 4, ("pre", "mixln"), 2  # mixln: 1 Post-LN layer of 4
    c.gettext_placements, c.gettext_bpe_vocab = (), 120  # X6's real batches: on in the smoke test
    return c


@pytest.fixture
def small_corpus(tmp_path, monkeypatch):
    """The gettext arm reads a corpus built here from small .mo files (tests/train/test_gettext_task.py), not the
    system's catalogs: data_gettext.cached_corpus answers with it."""
    spec = CorpusSpec(prefixes=(write_catalogs(tmp_path / "prefix"),), valid_fraction=0.15, test_fraction=0.15,
                      vocab_size=120, min_pairs=20)  # fmt: skip
    build_corpus(spec, str(tmp_path / "corpus"))

    def cached_corpus(asked):
        assert asked.vocab_size == 120, asked  # the config's gettext_bpe_vocab reaches the builder
        return str(tmp_path / "corpus")

    monkeypatch.setattr(data_gettext, "cached_corpus", cached_corpus)
    grad_norms_at_init.gettext_corpus.cache_clear()
    yield
    grad_norms_at_init.gettext_corpus.cache_clear()


def test_grad_norms_at_init_smoke(tmp_path, small_corpus):
    config = _tiny()
    config.seq_len, config.gettext_placements = 16, ("post", "pre")  # the catalog's pairs fit 16 tokens
    config.gettext_num_seeds = 4  # the arm's own seed count
    saved = runner.run_study(
        "grad_norms_at_init", str(tmp_path), config, grad_norms_at_init.compute, grad_norms_at_init.plot
    )
    results = saved["results"]
    for figure in ("grad_fc2.png", "xiong_fig3.png", "xiong_fig3_gettext.png", "grad_deep_decoder.png"):
        assert (tmp_path / "grad_norms_at_init" / figure).exists()
    real = results["gettext"]
    assert set(real["runs"]) == {"post", "pre"} and len(real["data"]["manifest_sha256"]) == 64
    assert "path" not in real["data"] and real["data"]["bpe_vocab"] == 120 and real["data"]["pairs"]["train"] > 0
    assert np.shape(real["runs"]["post"]["decoder"][KERNEL]["norm_of_mean"]["seeds"]) == (4, 3)
    assert real["seeds"] == [1, 2, 3, 4] and real["num_seeds"] == 4
    deep = results["deep"]
    assert deep["num_layers"] == 4 and set(deep["runs"]) == {"pre", "mixln"}
    assert np.shape(deep["runs"]["mixln"]["decoder"][KERNEL]["norm_of_mean"]["seeds"]) == (3, 4)
    assert set(results["runs"]["encoder_decoder"]["post"]) == {"encoder", "decoder"}
    for placement in ("post", "pre", "resi_dual", "pre:scalenorm"):
        for stack in results["runs"]["encoder_decoder"][placement].values():
            for name in ("ffn/fc1/kernel", "ffn/fc2/kernel"):
                for metric in ("norm_of_mean", "mean_of_norms"):
                    m = stack[name][metric]
                    assert len(m["mean"]) == len(m["std"]) == 3
                    assert np.shape(m["seeds"]) == (3, 3)  # (seeds, layers): the rules need every seed
                    assert all(len(m[k]) == 3 for k in ("slope", "r2", "max_over_min", "first_over_last"))
                # triangle inequality: ||E[g]|| <= E||g|| per seed, so also for the seed means
                assert np.all(
                    np.array(stack[name]["norm_of_mean"]["mean"])
                    <= np.array(stack[name]["mean_of_norms"]["mean"]) * (1 + 1e-5)
                )
    assert results["seeds"] == [1, 2, 3]
    claims = {row["claim"] for row in judge("grad_norms_at_init", results)}
    assert claims == {"X6", "L3", "R5", "S1", "S3"} and claims <= set(CLAIMS)
    assert all(row["verdict"] in VERDICTS for row in judge("grad_norms_at_init", results))
    r5 = next(row for row in judge("grad_norms_at_init", results) if row["claim"] == "R5")
    assert "vs pre" in r5["key"] and "vs post" not in r5["key"]  # no deep Post-LN in this config


def test_probe_matches_param_probes_grad_norms():
    arch = "encoder_decoder"  # two stacks, cross attention: the layout param_probes walks
    model = normjax.Transformer(normjax.ModelConfig(arch=arch, placement="post", **TINY), rngs=nnx.Rngs(0))
    task = probe.CopyTask(arch, 2, 6, TINY["vocab_size"])
    ours = probe.ffn_grad_norms(model, task, num_batches=3, seed=5)
    batches = [probe.copy_tokens(task, k) for k in jax.random.split(jax.random.key(5), 3)]
    theirs = param_probes.grad_norms(model, lambda m, b: probe.copy_loss(m, task, b), batches)
    for stack, names in ours.items():
        for name, metrics in names.items():
            for metric, value in metrics.items():
                np.testing.assert_allclose(value, theirs["stacks"][stack][name][metric], rtol=1e-5, atol=1e-7)


def test_paired_batches_match_param_probes_on_the_training_loss():
    """The real-batch arm: ffn_grad_norms on given translation batches equals param_probes on training's masked
    target cross-entropy of the same batches (padding excluded)."""
    model = normjax.Transformer(normjax.ModelConfig(arch="encoder_decoder", placement="post", **TINY), rngs=nnx.Rngs(2))
    rng = np.random.default_rng(0)
    pairs = [(rng.integers(4, 31, rng.integers(1, 5)), rng.integers(4, 31, rng.integers(1, 5))) for _ in range(12)]
    source = batching.Seq2SeqBatches(pairs, batching.BatchSpec(batch_size=2, buckets=(6,)), seed=0)
    batches = [source.batch(i) for i in range(3)]
    assert not all(b["tgt_mask"].all() for b in batches)  # padding present: the mask matters
    stacked = {k: np.stack([b[k] for b in batches]) for k in batches[0]}
    ours = probe.ffn_grad_norms(model, probe.PairedBatches(), 3, seed=0, batches=stacked)

    def loss(m, b):
        logits, targets, mask = steps.forward(m, "seq2seq", b)
        return (optax.softmax_cross_entropy_with_integer_labels(logits, targets) * mask).sum() / mask.sum()

    theirs = param_probes.grad_norms(model, loss, batches)
    for stack, names in ours.items():
        for name, metrics in names.items():
            for metric, value in metrics.items():
                np.testing.assert_allclose(value, theirs["stacks"][stack][name][metric], rtol=1e-5, atol=1e-7)
    with pytest.raises(ValueError, match="4 batches asked for, 3 given"):
        probe.ffn_grad_norms(model, probe.PairedBatches(), 4, seed=0, batches=stacked)
    with pytest.raises(ValueError, match="a CopyTask draws its batches and takes none"):  # not silently ignored
        probe.ffn_grad_norms(model, probe.CopyTask("encoder_decoder", 2, 6, 31), 3, seed=0, batches=stacked)
    with pytest.raises(ValueError, match="PairedBatches needs them"):
        probe.ffn_grad_norms(model, probe.PairedBatches(), 3, seed=0)


def test_one_batch_norm_of_mean_is_the_batch_norm():
    model = normjax.Transformer(normjax.ModelConfig(arch="encoder", placement="pre", **TINY), rngs=nnx.Rngs(1))
    task = probe.CopyTask("encoder", 2, 6, TINY["vocab_size"])
    out = probe.ffn_grad_norms(model, task, num_batches=1, seed=0)
    for metrics in out["encoder"].values():
        np.testing.assert_allclose(metrics["norm_of_mean"], metrics["mean_of_norms"], rtol=1e-6)
        np.testing.assert_array_equal(metrics["std_of_norms"], 0.0)


@pytest.mark.parametrize("preset", ["quick", "standard", "paper"])
def test_presets_are_valid_with_three_seeds_or_more(preset):
    config = presets.get_config(preset)
    schemas.validate(studies.get("grad_norms_at_init"), config)
    assert config.num_seeds >= 3


def _profile(slopes, log_range=None):
    """A synthetic per-seed profile: the numbers the rules read."""
    log_range = np.abs(slopes) * 5 if log_range is None else np.asarray(log_range, float)
    return {
        "slope": list(slopes),
        "r2": [0.9] * len(slopes),
        "max_over_min": list(np.exp(log_range)),
        "first_over_last": list(np.exp(log_range)),
    }


def _stack(profile):
    return {KERNEL: {m: profile for m in ("norm_of_mean", "mean_of_norms")}}


def _results(post, pre, post_enc=None, pre_enc=None, deep=None, num_seeds=3):
    """Synthetic results of the 6-6 model: decoder slopes `post`, `pre`; encoder slopes `post_enc`, `pre_enc`
    (default: the decoder's); `deep` = {placement: per-seed ln max/min} of the deep decoder."""
    enc = {"post": post if post_enc is None else post_enc, "pre": pre if pre_enc is None else pre_enc}
    runs = {
        p: {"decoder": _stack(_profile(v)), "encoder": _stack(_profile(enc[p]))}
        for p, v in (("post", post), ("pre", pre))
    }
    out = {"num_batches": 4, "num_seeds": num_seeds, "runs": {"encoder_decoder": runs}}
    if deep is not None:
        deep_runs = {p: {"decoder": _stack(_profile([0.0] * len(r), r))} for p, r in deep.items()}
        out["deep"] = {"arch": "decoder", "num_layers": 24, "num_batches": 4, "runs": deep_runs}
    return out


def _with_gettext(results, post, pre, post_enc=None):
    """`results` with a real-batch arm whose decoder slopes are `post`, `pre` (encoder: `post_enc` for Post-LN,
    else the decoder's), with its own seed count (len(post))."""
    enc = {"post": post if post_enc is None else post_enc, "pre": pre}
    runs = {
        p: {"decoder": _stack(_profile(v)), "encoder": _stack(_profile(enc[p]))}
        for p, v in (("post", post), ("pre", pre))
    }
    data = {"pairs": {"train": 100, "valid": 3, "test": 3}, "vocab_size": 500}
    return results | {"gettext": {"data": data, "num_seeds": len(post), "seeds": list(range(len(post))), "runs": runs}}


def _verdicts(results):
    return {row["claim"]: row["verdict"] for row in judge("grad_norms_at_init", results)}


GROWS, FLAT = [0.40, 0.42, 0.41], [0.00, 0.01, -0.01]


def test_x6_and_l3_can_both_hold():
    # Xiong's decoder grows under Post-LN, Pre-LN is flat; Liu's encoder does not grow: both papers right at once
    v = _verdicts(_results(post=GROWS, pre=FLAT, post_enc=FLAT))
    assert v["X6"] == v["L3"] == v["S3"] == "holds"
    assert v["S1"] == "partly holds"  # the folklore's 'every stack' is what fails, not X6 or L3


def test_x6_is_judged_on_the_decoder_only():
    for post_enc in (FLAT, GROWS, [-0.3, -0.31, -0.32]):
        assert _verdicts(_results(post=GROWS, pre=FLAT, post_enc=post_enc, pre_enc=GROWS))["X6"] == "holds"
    assert _verdicts(_results(post=GROWS, pre=GROWS, post_enc=FLAT))["X6"] == "partly holds"  # Pre-LN decoder grows


def test_l3_wants_the_encoder_not_to_grow():
    assert _verdicts(_results(post=GROWS, pre=FLAT))["L3"] == "partly holds"  # both stacks grow


def test_rules_a_claim_that_fails():
    v = _verdicts(_results(post=[-0.20, -0.22, -0.21], pre=[0.30, 0.31, 0.32]))
    assert v["X6"] == v["L3"] == v["S1"] == v["S3"] == "does not hold"


def test_rules_noisy_mean_passes_but_interval_straddles():
    # mean slope 0.1 > 0.05, but the 95% interval over 3 seeds reaches below 0.05: not 'grows'
    v = _verdicts(_results(post=[0.0, 0.2, 0.1], pre=FLAT, post_enc=FLAT))
    assert v["L3"] == v["X6"] == INCONCLUSIVE  # the decoder's trend is undecided, the rest supported
    assert v["S1"] == "does not hold"  # the encoder's Post-LN is flat (contradicted), the decoder's undecided
    # Pre-LN's mean slope 0.0 is flat, its interval [-0.25, 0.25] is not
    rows = judge("grad_norms_at_init", _results(post=GROWS, pre=[-0.1, 0.1, 0.0]))
    x6 = next(row for row in rows if row["claim"] == "X6")
    assert x6["verdict"] == INCONCLUSIVE and "underpowered" in x6["reason"]  # a 0.5-wide interval, a 0.1 band


def test_r5_against_pre_first_then_post():
    pre, post = [0.55, 0.56, 0.57], [2.05, 2.06, 2.07]  # per-seed ln max/min
    assert (
        _verdicts(_results(GROWS, FLAT, deep={"pre": pre, "post": post, "mixln": [0.20, 0.21, 0.22]}))["R5"] == "holds"
    )
    v = _verdicts(_results(GROWS, FLAT, deep={"pre": pre, "post": post, "mixln": [0.90, 0.91, 0.92]}))
    assert v["R5"] == "partly holds"  # flatter than Post-LN, not than Pre-LN
    assert _verdicts(_results(GROWS, FLAT, deep={"pre": pre, "mixln": [0.90, 0.91, 0.92]}))["R5"] == "does not hold"
    assert _verdicts(_results(GROWS, FLAT, deep={"pre": pre, "mixln": [0.0, 1.0, 0.5]}))["R5"] == INCONCLUSIVE
    assert _verdicts(_results(GROWS, FLAT, deep={"post": post, "mixln": pre}))["R5"] == "not testable at this scale"


def test_r5_row_says_its_training_half_is_trained_layers_row():
    rows = judge("grad_norms_at_init", _results(GROWS, FLAT, deep={"pre": [0.5] * 3, "mixln": [0.4, 0.41, 0.42]}))
    r5 = next(row for row in rows if row["claim"] == "R5")
    assert "at init" in r5["measured"] and "trained_layers" in r5["reason"] and "during pre-training" in r5["reason"]


def test_rules_with_fewer_than_three_seeds_say_so():
    rows = judge("grad_norms_at_init", _results(post=[0.40, 0.42], pre=[0.0, 0.01], num_seeds=2))
    assert {row["verdict"] for row in rows} == {"not testable at this scale"}
    assert all("only 2 seed(s)" in row["reason"] for row in rows if row["claim"] != "R5")


def test_x6_on_real_batches_is_judged_flat_relative_to_post_ln():
    # Pre-LN's slopes near +0.04: outside the copy task's absolute band [-0.05, 0.05] at 3 seeds, inside a quarter
    # of Post-LN's 0.41 (+-0.1025); the copy task's profiles (pre grows there) are reported, not judged
    copy = _results(post=GROWS, pre=GROWS)
    assert _verdicts(copy)["X6"] == "partly holds"
    row = next(
        r for r in judge("grad_norms_at_init", _with_gettext(copy, GROWS, [0.03, 0.04, 0.05])) if r["claim"] == "X6"
    )
    assert row["verdict"] == "holds" and "copy task (not judged)" in row["measured"] and "+-0.102" in row["reason"]
    assert row["figure"] == "xiong_fig3_gettext.png"
    assert _verdicts(_with_gettext(copy, GROWS, [0.20, 0.21, 0.22]))["X6"] == "partly holds"  # pre grows too
    assert _verdicts(_with_gettext(copy, FLAT, FLAT))["X6"] == "does not hold"  # post does not grow, band +-0


def test_l3_is_judged_on_the_same_real_batches_as_x6():
    # the copy task's Post-LN encoder grows (partly holds there); the gettext arm's does not: L3 reads the gettext
    # arm, as X6 does, over the arm's own seeds, and reports the copy task beside it
    copy = _results(post=GROWS, pre=FLAT)
    assert _verdicts(copy)["L3"] == "partly holds"
    flat5 = [0.0, 0.01, -0.01, 0.005, -0.005]
    real = _with_gettext(copy, GROWS + [0.41, 0.40], [0.0] * 5, post_enc=flat5)
    row = next(r for r in judge("grad_norms_at_init", real) if r["claim"] == "L3")
    assert row["verdict"] == "holds" and row["figure"] == "xiong_fig3_gettext.png"
    assert "gettext De-En batches" in row["measured"] and "copy task (not judged)" in row["measured"]
    assert "over 5 seeds" in row["reason"] and row["key"].startswith("gettext ")
    assert _verdicts(_with_gettext(copy, GROWS, FLAT, post_enc=GROWS))["L3"] == "partly holds"
    assert _verdicts(_with_gettext(_results(post=GROWS, pre=FLAT, post_enc=FLAT), FLAT, FLAT))["L3"] == "does not hold"
