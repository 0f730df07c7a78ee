"""amplification at a tiny size: results.json schema, verdict rows, dF = 0 for dW = 0, linear for tiny steps."""

import jax
import ml_collections
import numpy as np
import pytest

from normjax.report import Verdict
from normjax.report.judge import judge
from normjax.studies import amplification, runner


def tiny_config(**changes):
    c = ml_collections.ConfigDict(
        dict(
            placements=("post", "admin_profiled"),
            depths=(1, 2),
            vocab_size=17,
            d_model=8,
            num_heads=2,
            d_ff=16,
            batch_size=2,
            seq_len=4,
            num_seeds=2,
            kinds=("random",),
            eps={"random": 1e-2, "grad_sign": 1e-4},
            scopes=("branch", "all"),
        )
    )
    c.update(changes)
    return c


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("work")
    return runner.run_study("amplification", str(workdir), tiny_config(), amplification.compute, amplification.plot)


def test_results_schema_and_verdicts(saved):
    results = saved["results"]
    assert results["kinds"] == ["random"] and results["scopes"] == ["branch", "all"]
    for placement in ("post", "admin_profiled"):
        agg = results["runs"][placement]
        assert agg["N"] == [2, 4]
        for scope in ("branch", "all"):
            a = agg[scope]["random"]
            assert len(a["var_mean"]) == 2 and a["fit"]["better"] in ("linear", "log")
    admin = results["runs"]["admin_profiled"]
    assert len(admin["omega_last"]["mean"]) == 2 and len(admin["omega_profiled_deepest"]) == 4
    rows = judge("amplification", results)
    assert [r["claim"] for r in rows] == ["L1", "L2"]
    for row in rows:
        Verdict(**row)
    assert len(saved["figures"]) == 4


def _changes(model, data, eps, kinds=("random", "grad_sign")):
    return amplification.output_changes(
        model, data, kinds, dict.fromkeys(kinds, eps), ("branch", "all"), jax.random.key(0)
    )


def test_no_update_no_change_and_linear_for_tiny_steps():
    model, data, _ = amplification.build(tiny_config(), "post", 2, 0)
    zero = _changes(model, data, 0.0)
    small, double = _changes(model, data, 1e-4), _changes(model, data, 2e-4)
    for scope in ("branch", "all"):
        for kind in ("random", "grad_sign"):
            assert zero[scope][kind]["rms"] == 0.0
            assert small[scope][kind]["rms"] > 0
            np.testing.assert_allclose(double[scope][kind]["rms"] / small[scope][kind]["rms"], 2.0, rtol=2e-2)


def test_branch_scope_moves_only_sublayer_weights():
    model, _, _ = amplification.build(tiny_config(), "admin", 1, 0)
    params = jax.tree_util.tree_flatten_with_path(amplification.nnx.state(model, amplification.nnx.Param))[0]
    mask = jax.tree.leaves(amplification.scope_mask(amplification.nnx.state(model, amplification.nnx.Param), "branch"))
    for (path, _), m in zip(params, mask, strict=True):
        name = jax.tree_util.keystr(path)
        assert float(m) == (1.0 if "'branch'" in name else 0.0), name
