"""jacobian_spectrum at a tiny size: results.json schema, verdict rows, ReZero = I, chain rule."""

import jax
import ml_collections
import numpy as np
import pytest
from flax import nnx
from jax.flatten_util import ravel_pytree

import normjax
from normjax import studies
from normjax.report import Verdict
from normjax.report.claims import CONSTRUCTION, INCONCLUSIVE, NOT_TESTABLE
from normjax.studies import runner
from normjax.studies import schema as schemas
from normjax.studies.jacobian_spectrum import config as presets
from normjax.studies.jacobian_spectrum import measure as jacobian_spectrum
from normjax.studies.judge import judge
from normjax.studies.schema import ConfigError


def tiny_config(**changes):
    c = ml_collections.ConfigDict(
        dict(
            placements=("post", "pre", "rezero", "pre+qk_norm"),
            stream_placements=("mhc",),
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
            assert {"max", "min", "q10", "rms", "grad_reach"} <= set(agg["e2e"]) and len(agg["e2e"]["min"]["mean"]) == L
            assert len(agg["e2e"]["grad_reach"]["mean"]) == L
    assert results["seeds"] == [1, 2, 3]
    assert np.shape(results["runs"]["post"]["2"]["io"]["log_std"]["seeds"]) == (3,)  # every seed kept
    assert np.shape(results["runs"]["post"]["2"]["e2e"]["min"]["seeds"]) == (3, 2)
    rows = judge("jacobian_spectrum", results)
    assert {r["claim"] for r in rows} == {"R1", "R2", "S3", "S7", "N1", "N2"}
    for row in rows:
        Verdict(**row)
    by_claim = {r["claim"]: r["verdict"] for r in rows}
    assert by_claim["R1"] == by_claim["S7"] == CONSTRUCTION  # ReZero is the identity by construction
    assert by_claim["N1"] == NOT_TESTABLE and by_claim["N2"] == CONSTRUCTION  # no lns run; mhc's H_res measured
    assert len(saved["figures"]) == 8 and len(results["streams"]["mhc"]["2"]) == 3


def test_rezero_io_jacobian_is_identity(saved):
    for L in ("1", "2"):
        agg = saved["results"]["runs"]["rezero"][L]
        np.testing.assert_array_equal(np.array(agg["io_sv"][0]), 1.0)
        assert agg["max_abs_J_minus_I"] == 0.0 and agg["max_abs_xL_minus_x0"] == 0.0
    for grads in saved["results"]["rezero_gradients"]:  # one per seed
        assert grads["other_grad_max"] == 0.0 and grads["gate_grad_min"] > 0


TARGETS = jax.random.randint(jax.random.key(7), (1, 3), 0, 17)


def _measured_exactly(placement):
    """A 2-block encoder, 3 tokens: (model, tokens, measure_exact's results, the stack input x_0)."""
    model = normjax.Transformer(jacobian_spectrum.model_config(tiny_config(), placement, 2), rngs=nnx.Rngs(0))
    tokens = (jax.random.randint(jax.random.key(1000), (1, 3), 0, 17),)
    return (
        model,
        tokens,
        jacobian_spectrum.measure_exact(model, tokens, 1e-12, TARGETS),
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


@pytest.mark.parametrize("placement", ["shc", "mhc"])
def test_hyper_io_jacobian_is_the_stack_jacobian_of_the_streams(placement, x64):
    """Hyper-connections carry n = 4 streams, each starting at x_0: the block products give d X_L / d x_0."""
    model, _, measured, x0 = _measured_exactly(placement)
    n = model.stacks["encoder"].hyper_streams
    stack = normjax.stack_fn(model, stack="encoder")
    direct = normjax.jacobian.singular_values(lambda x: stack(normjax.HyperStreams((x,) * n)), x0, method="exact")
    assert n == 4 and measured["state"] == "4 streams" and len(measured["io_sv"]) == x0.size
    np.testing.assert_allclose(measured["io_sv"], np.asarray(direct), rtol=1e-10, atol=1e-12)
    assert len(measured["e2e"]["max"]) == 2 and measured["max_abs_J_minus_I"] > 0  # the branches are there


@pytest.mark.parametrize("placement", ["pre", "post", "shc"])
def test_gradient_reach_is_the_backpropagated_loss_gradient(placement, x64):
    """Chain rule: (d x_L / d x_l)^T g is d Loss / d x_l, here by jax.grad through blocks l..L-1 and the head."""
    model, tokens, measured, x0 = _measured_exactly(placement)
    stack = model.stacks["encoder"]

    def loss(x_l, l):  # Loss as a function of x_l: blocks l..1, the final norm and the head
        last = x_l if l == 2 else normjax.stack_fn(model, start=l, stack="encoder")(x_l)
        return jacobian_spectrum._cross_entropy(model.logits(stack.output(last)), TARGETS[0])

    states = [stack.initial_state(x0)]
    for l in range(2):
        states.append(normjax.block_fn(model, l, "encoder")(states[-1]))
    norms = [float(np.linalg.norm(ravel_pytree(jax.grad(lambda x, l=l: loss(x, l))(states[l]))[0])) for l in range(3)]
    assert norms[-1] > 0
    np.testing.assert_allclose(measured["e2e"]["grad_reach"], np.array(norms[:2]) / norms[-1], rtol=1e-10)


@pytest.mark.parametrize("placement", ["resi_dual", "shc", "mhc"])
def test_multi_stream_placements_are_refused_matrix_free_in_one_line(placement):
    with pytest.raises(ConfigError, match=f"{placement!r} is invalid here: {placement} carries .* matrix-free"):
        schemas.validate(studies.get("jacobian_spectrum"), tiny_config(placements=(placement,), exact_max_n=1))
    schemas.validate(studies.get("jacobian_spectrum"), tiny_config(placements=(placement,)))  # exact: measured


@pytest.mark.slow
def test_matrix_free_path_matches_exact(x64):
    config = tiny_config(exact_max_n=0, top_k=3)
    free = jacobian_spectrum.measure(config, "pre", 1, 0)
    exact = jacobian_spectrum.measure(tiny_config(), "pre", 1, 0)
    assert not free["exact"] and exact["exact"]
    np.testing.assert_allclose(free["io_sv"], exact["io_sv"][:3], rtol=1e-6)
    np.testing.assert_allclose(free["block_norm"], exact["block_norm"], rtol=1e-6)
    np.testing.assert_allclose(free["e2e"]["rms"], exact["e2e"]["rms"], rtol=0.5)  # Hutchinson: an estimate
    np.testing.assert_allclose(free["e2e"]["grad_reach"], exact["e2e"]["grad_reach"], rtol=1e-10)  # VJPs: exact


@pytest.mark.parametrize("preset", ["quick", "standard", "paper"])
def test_presets_are_valid_with_three_seeds_or_more(preset):
    config = presets.get_config(preset)
    schemas.validate(studies.get("jacobian_spectrum"), config)
    assert config.num_seeds >= 3


def _synthetic(post_std, pre_reach, pre_q10, rezero_dev=0.0, num_seeds=3, exact=True):
    """Results at depths 4 and 12: per depth, one value per seed of Post-LN's log-sv std; Pre-LN's worst
    gradient reach and 10th-percentile singular value per seed (the same at every layer; its sigma_min is 1e-3,
    reported only); ReZero exact up to `rezero_dev`; `exact` False: matrix-free (no q10 or sigma_min)."""

    def run(log_std, reach, q10, dev, sigma_min):
        io = {"log_std": {"seeds": log_std}, "below_floor": {"seeds": [0.0] * num_seeds}}
        e2e = {
            "min": {"seeds": [[v if exact else np.nan] * 2 for v in sigma_min]},
            "q10": {"seeds": [[v if exact else np.nan] * 2 for v in q10]},
            "rms": {"seeds": [[1.0, 1.0]] * num_seeds},
            "grad_reach": {"seeds": [[v, v] for v in reach]},
            "max": {"mean": [2.0, 1.5]},
        }
        runs = {"max_dev_from_1": dev, "max_abs_J_minus_I": dev, "max_abs_xL_minus_x0": dev, "exact": exact}
        return runs | {"io": io, "e2e": e2e}

    ones, tiny = [1.0] * num_seeds, [1e-3] * num_seeds
    runs = {
        "post": {str(L): run(std, ones, ones, 1.0, ones) for L, std in zip((4, 12), post_std, strict=True)},
        "pre": {str(L): run(ones, pre_reach, pre_q10, 1.0, tiny) for L in (4, 12)},
        "rezero": {str(L): run([rezero_dev] * num_seeds, ones, ones, rezero_dev, ones) for L in (4, 12)},
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


POST_WIDENS = [[1.4, 1.5, 1.45], [2.8, 2.9, 2.85]]
UNTESTED = {"N1": NOT_TESTABLE, "N2": NOT_TESTABLE}  # the synthetic results have no lns run and no streams


def test_rules_clean_pass():
    v = _verdicts(_synthetic(POST_WIDENS, [1.0, 1.05, 1.1], [0.8, 0.82, 0.81]))
    assert (
        v == {"R1": CONSTRUCTION, "S7": CONSTRUCTION, "R2": "holds", "S3": "holds"} | UNTESTED
    )  # sigma_min: not judged


def test_rules_a_claim_that_fails():
    v = _verdicts(
        _synthetic([[2.8, 2.9, 2.85], [1.4, 1.5, 1.45]], [0.3, 0.4, 0.35], [0.01, 0.02, 0.01], rezero_dev=1e-6)
    )
    assert v == {"R1": "does not hold", "S7": "does not hold", "R2": "does not hold", "S3": "does not hold"} | UNTESTED


def test_s3_partly_holds_when_the_gradient_reaches_but_many_directions_shrink():
    assert _verdicts(_synthetic(POST_WIDENS, [1.0, 1.05, 1.1], [0.1, 0.12, 0.11]))["S3"] == "partly holds"


def test_rules_noisy_mean_passes_but_interval_straddles():
    # mean increase 0.3 > 0.1, but the seeds spread it over [-0.5, 1.1]: not 'widens'
    post = [[1.0, 1.0, 1.0], [0.9, 1.7, 1.3]]
    # worst reach about 1.0 > 0.9 with an interval reaching below it: inconclusive, not a failure
    v = _verdicts(_synthetic(post, [0.8, 1.3, 1.0], [0.8, 0.82, 0.81]))
    assert v["R2"] == v["S3"] == INCONCLUSIVE


def test_s3_matrix_free_is_judged_on_the_gradient_reach_alone():
    rows = judge("jacobian_spectrum", _synthetic(POST_WIDENS, [1.0, 1.05, 1.1], [0.1, 0.1, 0.1], exact=False))
    s3 = next(r for r in rows if r["claim"] == "S3")
    assert s3["verdict"] == "holds" and "matrix-free" in s3["measured"]


def test_s3_on_results_without_the_gradient_reach_is_not_testable():
    results = _synthetic(POST_WIDENS, [1.0, 1.05, 1.1], [0.8, 0.82, 0.81])
    for run in results["runs"]["pre"].values():
        del run["e2e"]["grad_reach"]
    assert _verdicts(results)["S3"] == "not testable at this scale"


def test_rules_with_fewer_than_three_seeds_say_so():
    v = _verdicts(_synthetic([[1.4, 1.5], [2.8, 2.9]], [1.0, 1.01], [0.8, 0.82], num_seeds=2))
    assert (
        v
        == {
            "R1": CONSTRUCTION,
            "S7": CONSTRUCTION,
            "R2": "not testable at this scale",
            "S3": "not testable at this scale",
        }
        | UNTESTED
    )
