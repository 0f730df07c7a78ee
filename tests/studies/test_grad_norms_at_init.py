"""grad_norms_at_init at a tiny size: results schema, verdict rows, the gradient probe's metrics."""

import jax
import ml_collections
import numpy as np
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

TINY = dict(vocab_size=31, d_model=16, num_heads=2, d_ff=32, num_layers=1, max_len=8)


def _tiny():
    c = ml_collections.ConfigDict()
    c.archs = ("encoder_decoder",)  # every compile costs seconds: one model per placement
    c.placements = ("post", "pre", "resi_dual", "pre:scalenorm")
    c.vocab_size, c.d_model, c.num_heads, c.d_ff, c.num_layers = 31, 16, 2, 32, 3
    c.batch_size, c.seq_len, c.num_batches = 2, 6, 3
    c.seed, c.num_seeds = 1, 3  # not seed 0: --config.seed=1 must work
    return c


def test_grad_norms_at_init_smoke(tmp_path):
    saved = runner.run_study(
        "grad_norms_at_init", str(tmp_path), _tiny(), grad_norms_at_init.compute, grad_norms_at_init.plot
    )
    results = saved["results"]
    assert (tmp_path / "grad_norms_at_init" / "grad_fc2.png").exists()
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
    assert r5["verdict"] == "not testable at this scale"  # no mixln in this config


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


def _results(post, pre, post_enc=None, mixln=None, num_seeds=3):
    """Synthetic results of the 6-6 model: Post-LN slopes `post` (decoder) and `post_enc` (encoder)."""

    def stacks(dec, enc, log_range=None):
        return {
            s: {KERNEL: {m: _profile(v, log_range) for m in ("norm_of_mean", "mean_of_norms")}}
            for s, v in (("decoder", dec), ("encoder", enc))
        }

    runs = {"post": stacks(post, post if post_enc is None else post_enc), "pre": stacks(pre, pre)}
    if mixln is not None:
        runs["mixln"] = stacks(pre, pre, log_range=mixln)
    return {"num_batches": 4, "num_seeds": num_seeds, "runs": {"encoder_decoder": runs}}


def _verdicts(results):
    return {row["claim"]: row["verdict"] for row in judge("grad_norms_at_init", results)}


def test_rules_clean_pass():
    v = _verdicts(_results(post=[0.40, 0.42, 0.41], pre=[0.00, 0.01, -0.01], post_enc=[0.00, 0.01, -0.01]))
    assert v["X6"] == "partly holds"  # the encoder's Post-LN is flat: X6 wants it to grow
    assert v["L3"] == "holds" and v["S3"] == "holds" and v["S1"] == "partly holds"
    v = _verdicts(_results(post=[0.40, 0.42, 0.41], pre=[0.00, 0.01, -0.01]))
    assert v["X6"] == v["S1"] == "holds" and v["L3"] == "partly holds"  # both stacks grow


def test_rules_a_claim_that_fails():
    v = _verdicts(_results(post=[-0.20, -0.22, -0.21], pre=[0.30, 0.31, 0.32]))
    assert v["X6"] == v["L3"] == v["S1"] == v["S3"] == "does not hold"


def test_rules_noisy_mean_passes_but_interval_straddles():
    # mean slope 0.1 > 0.05, but the 95% interval over 3 seeds reaches below 0.05: not 'grows'
    v = _verdicts(_results(post=[0.0, 0.2, 0.1], pre=[0.0, 0.01, -0.01], post_enc=[0.0, 0.01, -0.01]))
    assert v["L3"] == INCONCLUSIVE and v["X6"] == "partly holds"  # the decoder's trend is undecided
    assert v["S1"] == "does not hold"  # the encoder's Post-LN is flat (contradicted), the decoder's undecided
    # Pre-LN's mean slope 0.0 is flat, its interval [-0.25, 0.25] is not
    assert _verdicts(_results(post=[0.4, 0.41, 0.42], pre=[-0.1, 0.1, 0.0]))["X6"] == INCONCLUSIVE


def test_rule_mixln_flatter_needs_the_whole_interval_above():
    post, pre = [0.40, 0.42, 0.41], [0.10, 0.12, 0.11]  # ln max/min: post about 2.05, pre about 0.55
    assert _verdicts(_results(post, pre, mixln=[0.20, 0.21, 0.22]))["R5"] == "holds"
    assert _verdicts(_results(post, pre, mixln=[0.90, 0.91, 0.92]))["R5"] == "does not hold"
    assert _verdicts(_results(post, pre, mixln=[0.0, 1.0, 0.5]))["R5"] == INCONCLUSIVE  # mean margin > 0, noisy


def test_rules_with_fewer_than_three_seeds_say_so():
    rows = judge("grad_norms_at_init", _results(post=[0.40, 0.42], pre=[0.0, 0.01], num_seeds=2))
    assert {row["verdict"] for row in rows} == {"not testable at this scale"}
    assert all("only 2 seed(s)" in row["reason"] for row in rows if row["claim"] != "R5")
