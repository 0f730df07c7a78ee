"""jacobian_spectrum at a tiny size: results.json schema, verdict rows, ReZero = I, chain rule."""

import jax
import ml_collections
import numpy as np
import pytest
from flax import nnx

import normjax
from normjax import studies
from normjax.report import Verdict
from normjax.report.claims import CONSTRUCTION, INCONCLUSIVE
from normjax.studies import runner
from normjax.studies import schema as schemas
from normjax.studies.jacobian_spectrum import config as presets
from normjax.studies.jacobian_spectrum import measure as jacobian_spectrum
from normjax.studies.judge import judge


def tiny_config(**changes):
    c = ml_collections.ConfigDict(
        dict(
            placements=("post", "pre", "rezero", "pre+qk_norm"),
            depths=(1, 2),
            vocab_size=17,
            d_model=8,
            num_heads=2,
            d_ff=16,
            seq_len=3,
            seed=1,  # not seed 0: --config.seed=1 must work
            num_seeds=3,
            exact_max_n=4096,
            top_k=4,
            resolution=1e-12,
        )
    )
    c.update(changes)
    return c


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("work")
    return runner.run_study(
        "jacobian_spectrum", str(workdir), tiny_config(), jacobian_spectrum.compute, jacobian_spectrum.plot
    )


def test_results_schema_and_verdicts(saved):
    results = saved["results"]
    n = 3 * 8
    assert results["depths"] == [1, 2] and results["n"] == n
    for placement in ("post", "pre", "rezero", "pre+qk_norm"):
        for L in (1, 2):
            agg = results["runs"][placement][str(L)]
            assert len(agg["io_sv"][0]) == n
            assert len(agg["block_norm"]["mean"]) == L
            assert {"max", "min", "rms"} <= set(agg["e2e"]) and len(agg["e2e"]["min"]["mean"]) == L
    assert results["seeds"] == [1, 2, 3]
    assert np.shape(results["runs"]["post"]["2"]["io"]["log_std"]["seeds"]) == (3,)  # every seed kept
    assert np.shape(results["runs"]["post"]["2"]["e2e"]["min"]["seeds"]) == (3, 2)
    rows = judge("jacobian_spectrum", results)
    assert {r["claim"] for r in rows} == {"R1", "R2", "S3", "S7"}
    for row in rows:
        Verdict(**row)
    by_claim = {r["claim"]: r["verdict"] for r in rows}
    assert by_claim["R1"] == by_claim["S7"] == CONSTRUCTION  # ReZero is the identity by construction
    assert len(saved["figures"]) == 6


def test_rezero_io_jacobian_is_identity(saved):
    for L in ("1", "2"):
        agg = saved["results"]["runs"]["rezero"][L]
        np.testing.assert_array_equal(np.array(agg["io_sv"][0]), 1.0)
        assert agg["max_abs_J_minus_I"] == 0.0 and agg["max_abs_xL_minus_x0"] == 0.0
    for grads in saved["results"]["rezero_gradients"]:  # one per seed
        assert grads["other_grad_max"] == 0.0 and grads["gate_grad_min"] > 0


def _measured_exactly(placement):
    """A 2-block encoder, 3 tokens: (model, tokens, measure_exact's results, the stack input x_0)."""
    model = normjax.Transformer(jacobian_spectrum.model_config(tiny_config(), placement, 2), rngs=nnx.Rngs(0))
    tokens = (jax.random.randint(jax.random.key(1000), (1, 3), 0, 17),)
    return (
        model,
        tokens,
        jacobian_spectrum.measure_exact(model, tokens, 1e-12),
        normjax.embed(model, *tokens, "encoder")[0],
    )


def test_block_product_equals_stack_jacobian(x64):
    """Chain rule: the product of the per-block Jacobians is the Jacobian of the whole stack."""
    model, tokens, measured, x0 = _measured_exactly("post")
    direct = normjax.jacobian.singular_values(normjax.stack_fn(model, stack="encoder"), x0, method="exact")
    np.testing.assert_allclose(measured["io_sv"], np.asarray(direct), rtol=1e-10, atol=1e-12)
    x1 = normjax.probe(model, *tokens)[1]["encoder"].streams[1][0]
    block1 = normjax.jacobian.spectral_norm(normjax.block_fn(model, 1, "encoder"), x1, method="exact")
    np.testing.assert_allclose(measured["block_norm"][1], float(block1), rtol=1e-10)


def test_resi_dual_io_jacobian_is_the_stack_jacobian_of_the_pair(x64):
    """ResiDual's state is (x, d) and both start at x_0: the block products give d (x_L, d_L) / d x_0 exactly."""
    model, tokens, measured, x0 = _measured_exactly("resi_dual")
    stack = normjax.stack_fn(model, stack="encoder")
    direct = normjax.jacobian.singular_values(lambda x: stack(normjax.DualStream(x, x)), x0, method="exact")
    assert len(measured["io_sv"]) == x0.size and measured["state"] == "pair (x, d)"
    np.testing.assert_allclose(measured["io_sv"], np.asarray(direct), rtol=1e-10, atol=1e-12)
    assert len(measured["e2e"]["max"]) == 2 and measured["max_abs_J_minus_I"] > 0  # not the identity


@pytest.mark.slow
def test_matrix_free_path_matches_exact(x64):
    config = tiny_config(exact_max_n=0, top_k=3)
    free = jacobian_spectrum.measure(config, "pre", 1, 0)
    exact = jacobian_spectrum.measure(tiny_config(), "pre", 1, 0)
    assert not free["exact"] and exact["exact"]
    np.testing.assert_allclose(free["io_sv"], exact["io_sv"][:3], rtol=1e-6)
    np.testing.assert_allclose(free["block_norm"], exact["block_norm"], rtol=1e-6)
    np.testing.assert_allclose(free["e2e"]["rms"], exact["e2e"]["rms"], rtol=0.5)  # Hutchinson: an estimate


@pytest.mark.parametrize("preset", ["quick", "standard", "paper"])
def test_presets_are_valid_with_three_seeds_or_more(preset):
    config = presets.get_config(preset)
    schemas.validate(studies.get("jacobian_spectrum"), config)
    assert config.num_seeds >= 3


def _synthetic(post_std, pre_sigma_min, pre_rms, rezero_dev=0.0, num_seeds=3):
    """Results at depths 4 and 12: per depth, one value per seed of Post-LN's log-sv std; Pre-LN's worst
    sigma_min and rms gain per seed (the same at every layer); ReZero exact up to `rezero_dev`."""

    def run(log_std, sigma_min, rms, dev):
        io = {"log_std": {"seeds": log_std}, "below_floor": {"seeds": [0.0] * num_seeds}}
        e2e = {
            "min": {"seeds": [[v, v] for v in sigma_min]},
            "rms": {"seeds": [[v, v] for v in rms]},
            "max": {"mean": [2.0, 1.5]},
        }
        return {"io": io, "e2e": e2e, "max_dev_from_1": dev, "max_abs_J_minus_I": dev, "max_abs_xL_minus_x0": dev}

    ones = [1.0] * num_seeds
    runs = {
        "post": {str(L): run(std, ones, ones, 1.0) for L, std in zip((4, 12), post_std, strict=True)},
        "pre": {str(L): run(ones, pre_sigma_min, pre_rms, 1.0) for L in (4, 12)},
        "rezero": {str(L): run([rezero_dev] * num_seeds, ones, ones, rezero_dev) for L in (4, 12)},
    }
    grads = [{"other_grad_max": 0.0, "gate_grad_min": 0.3, "num_other": 12}] * num_seeds
    return {
        "depths": [4, 12],
        "n": 24,
        "seq_len": 3,
        "resolution": 1e-12,
        "num_seeds": num_seeds,
        "runs": runs,
        "rezero_gradients": grads,
    }


def _verdicts(results):
    return {row["claim"]: row["verdict"] for row in judge("jacobian_spectrum", results)}


def test_rules_clean_pass():
    v = _verdicts(_synthetic([[1.4, 1.5, 1.45], [2.8, 2.9, 2.85]], [0.8, 0.82, 0.81], [1.0, 1.01, 1.02]))
    assert v == {"R1": CONSTRUCTION, "S7": CONSTRUCTION, "R2": "holds", "S3": "holds"}


def test_rules_a_claim_that_fails():
    v = _verdicts(
        _synthetic([[2.8, 2.9, 2.85], [1.4, 1.5, 1.45]], [0.01, 0.02, 0.01], [0.5, 0.4, 0.45], rezero_dev=1e-6)
    )
    assert v == {"R1": "does not hold", "S7": "does not hold", "R2": "does not hold", "S3": "does not hold"}


def test_rules_noisy_mean_passes_but_interval_straddles():
    # mean increase 0.3 > 0.1, but the seeds spread it over [-0.5, 1.1]: not 'widens'
    post = [[1.0, 1.0, 1.0], [0.9, 1.7, 1.3]]
    # worst sigma_min about 0.6 > 0.5 with an interval reaching below it: inconclusive, not a failure
    v = _verdicts(_synthetic(post, [0.4, 0.8, 0.6], [1.0, 1.01, 1.02]))
    assert v["R2"] == v["S3"] == INCONCLUSIVE


def test_rules_with_fewer_than_three_seeds_say_so():
    v = _verdicts(_synthetic([[1.4, 1.5], [2.8, 2.9]], [0.8, 0.82], [1.0, 1.01], num_seeds=2))
    assert v == {
        "R1": CONSTRUCTION,
        "S7": CONSTRUCTION,
        "R2": "not testable at this scale",
        "S3": "not testable at this scale",
    }
