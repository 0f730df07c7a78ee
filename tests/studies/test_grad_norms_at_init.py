"""grad_norms_at_init at a tiny size: results schema, verdict rows, the gradient probe's metrics."""

import jax
import ml_collections
import numpy as np
from flax import nnx

import normjax
from normjax.jacobian import param_probes
from normjax.report import CLAIMS, VERDICTS
from normjax.report.judge import judge
from normjax.studies import grad_norms_at_init, runner
from normjax.studies import grad_norms_at_init_probe as probe

TINY = dict(vocab_size=31, d_model=16, num_heads=2, d_ff=32, num_layers=1, max_len=8)


def _tiny():
    c = ml_collections.ConfigDict()
    c.archs = ("encoder_decoder",)  # every compile costs seconds: one model per placement
    c.placements = ("post", "pre", "resi_dual", "pre:scalenorm")
    c.vocab_size, c.d_model, c.num_heads, c.d_ff, c.num_layers = 31, 16, 2, 32, 3
    c.batch_size, c.seq_len, c.num_batches, c.num_seeds = 2, 6, 3, 2
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
                    assert {"slope", "stderr", "r2", "max_over_min"} <= set(m["fit"])
                # triangle inequality: ||E[g]|| <= E||g|| per seed, so also for the seed means
                assert np.all(
                    np.array(stack[name]["norm_of_mean"]["mean"])
                    <= np.array(stack[name]["mean_of_norms"]["mean"]) * (1 + 1e-5)
                )
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
