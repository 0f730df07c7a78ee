"""depth_scaling at a tiny size: results schema, verdict rows, scanned == looped gradient norms."""

import ml_collections
import numpy as np
from flax import nnx
from model_fixtures import scan_twin

import normjax
from normjax.report import CLAIMS, VERDICTS
from normjax.report.judge import judge
from normjax.studies import depth_scaling, runner
from normjax.studies.grad_norms_at_init_probe import CopyTask, ffn_grad_norms


def _tiny():
    c = ml_collections.ConfigDict()
    c.placements = ("post", "pre")
    c.settings = ("theory",)
    c.depths = (2, 4)
    c.vocab_size, c.d_model, c.num_heads, c.d_ff = 31, 16, 2, 32
    c.batch_size, c.seq_len, c.num_batches, c.num_seeds = 2, 6, 2, 2
    return c


def test_depth_scaling_smoke(tmp_path):
    saved = runner.run_study("depth_scaling", str(tmp_path), _tiny(), depth_scaling.compute, depth_scaling.plot)
    results = saved["results"]
    assert (tmp_path / "depth_scaling" / "depth_scaling.png").exists()
    for placement in ("post", "pre"):
        agg = results["runs"]["theory"][placement]
        assert agg["depths"] == [2, 4]
        for where in ("last", "first"):
            for name in ("ffn/fc1/kernel", "ffn/fc2/kernel"):
                for metric in ("mean_of_norms", "norm_of_mean"):
                    m = agg[where][name][metric]
                    assert np.array(m["values"]).shape == (2, 2)  # (depths, seeds)
                    assert {"exponent", "stderr", "prefactor", "r2"} <= set(m["fit"])
    rows = {row["claim"]: row for row in judge("depth_scaling", results)}
    assert set(rows) == {"X5", "S2"} and set(rows) <= set(CLAIMS)
    assert all(row["verdict"] in VERDICTS for row in rows.values())


def test_scanned_layers_give_the_looped_gradient_norms():
    # depth_scaling scans its layers (one compile per depth); the gradients must not change.
    cfg = normjax.ModelConfig(
        arch="encoder", vocab_size=31, d_model=16, num_heads=2, d_ff=32, num_layers=3, placement="post", max_len=8
    )
    looped = normjax.Transformer(cfg, rngs=nnx.Rngs(0))
    task = CopyTask("encoder", 2, 6, 31)
    a = ffn_grad_norms(looped, task, num_batches=2, seed=3)["encoder"]
    b = ffn_grad_norms(scan_twin(looped), task, num_batches=2, seed=3)["encoder"]
    for name, metrics in a.items():
        for metric, value in metrics.items():
            np.testing.assert_allclose(b[name][metric], value, rtol=1e-5, atol=1e-7)
