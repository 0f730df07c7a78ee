"""deep_training at a tiny size: results schema, verdict rows, and the model update being 0 at t = 0."""

import ml_collections
import numpy as np

from normjax.report import CLAIMS, VERDICTS
from normjax.report.judge import judge
from normjax.studies import deep_training, runner
from normjax.studies.deep_training_verdicts import decoder_deepnorm


def _tiny():
    c = ml_collections.ConfigDict()
    c.runs, c.depths = ("post", "deepnorm", "resi_dual", "post+no_bias"), (2,)
    c.side_runs, c.side_depths = (), ()
    c.d_model, c.num_heads, c.d_ff = 16, 2, 32
    c.seq_len, c.batch_size, c.max_bytes, c.data_seed = 16, 4, 100_000, 0
    c.lr, c.num_steps, c.update_lr = 3e-3, 4, 1e-4
    c.optimizer, c.b1, c.b2, c.eps = "adam", 0.9, 0.98, 1e-9
    c.early_steps, c.probe_every, c.final_window = 2, 2, 2
    c.divergence_factor, c.divergence_patience, c.divergence_check_every = 1.5, 10, 10
    c.seed = 0
    return c


def test_deep_training_smoke(tmp_path):
    saved = runner.run_study("deep_training", str(tmp_path), _tiny(), deep_training.compute, deep_training.plot)
    results = saved["results"]
    assert (tmp_path / "deep_training" / "depth_sweep.png").exists()
    assert (tmp_path / "deep_training" / "instability.png").exists()
    for run in ("post", "deepnorm", "resi_dual", "post+no_bias"):
        for depth in ("2",):
            rec = results["runs"][run][depth]
            assert rec["probes"]["step"] == [0, 1, 2, 4]
            assert len(rec["loss"]) == 4 and np.array(rec["probes"]["layer_grad_norm"]).shape == (4, int(depth))
            # F(x, theta_0) - F(x, theta_0) = 0 exactly; every Adam update moves the output
            for update in (rec["probes"]["update"], rec["small_lr_update"]):
                assert update[0] == 0.0 and min(update[1:]) > 0
    # DeepNorm's alpha read back from the stream is the paper's (2M)^(1/4)
    alpha = results["runs"]["deepnorm"]["2"]["init"]["deepnorm"]["alpha"]
    np.testing.assert_allclose(alpha, decoder_deepnorm(2)[0], rtol=1e-4)
    claims = {row["claim"] for row in judge("deep_training", results)}
    assert {"D1", "D2", "D3", "S7"} <= claims <= set(CLAIMS)
    assert all(row["verdict"] in VERDICTS for row in judge("deep_training", results))
