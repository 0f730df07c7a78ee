"""hidden_norms at a tiny size: results schema, verdict rows, and ReZero's stream staying put."""

import ml_collections
import numpy as np

from normjax.report import CLAIMS, VERDICTS
from normjax.report.judge import judge
from normjax.studies import hidden_norms, runner


def _tiny():
    c = ml_collections.ConfigDict()
    c.placements = ("post", "pre", "sandwich", "rezero", "resi_dual", "pre+embedding_norm")
    c.settings = ("theory", "real")
    c.vocab_size, c.d_model, c.num_heads, c.d_ff, c.num_layers = 31, 32, 2, 64, 4
    c.batch_size, c.seq_len, c.num_seeds = 2, 8, 2
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
    assert results["skipped_in_theory"] == ["pre+embedding_norm"]
    assert "pre+embedding_norm" not in results["runs"]["theory"]
    np.testing.assert_allclose(results["runs"]["real"]["pre+embedding_norm"]["stream_mean"][0], 1.0, rtol=1e-3)
    # ReZero at init is the identity: the stream never changes, so its norm is the same at every depth.
    rezero = np.array(results["runs"]["real"]["rezero"]["stream_mean"])
    np.testing.assert_allclose(rezero, rezero[0], rtol=1e-6)
    claims = {row["claim"] for row in judge("hidden_norms", results)}
    assert {"X2", "X3", "S4", "R4"} <= claims <= set(CLAIMS)
    assert all(row["verdict"] in VERDICTS for row in judge("hidden_norms", results))
    x2 = next(r for r in judge("hidden_norms", results) if r["claim"] == "X2")
    assert x2["verdict"] == "holds", x2  # the theory switch is exactly the setting, at any size
    # A rerun with the same config reuses the results instead of recomputing.
    again = runner.run_study("hidden_norms", str(tmp_path), _tiny(), hidden_norms.compute, hidden_norms.plot)
    assert again["created"] == saved["created"]
