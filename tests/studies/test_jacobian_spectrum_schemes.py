"""jacobian_spectrum's N1 (LayerNorm Scaling) and N2 (mHC) measurements and rules."""

import jax
import numpy as np
import pytest
from flax import nnx
from jax.flatten_util import ravel_pytree

import normjax
from normjax import hyper
from normjax.report.claims import CONSTRUCTION, NOT_TESTABLE
from normjax.studies.jacobian_spectrum import measure, streams
from normjax.studies.jacobian_spectrum import verdicts as rules
from normjax.studies.jacobian_spectrum.scheme_verdicts import lns_identity, mhc_composite
from tests.studies.test_jacobian_spectrum import tiny_config


def test_sinkhorn_product_is_row_stochastic_and_below_its_bound():
    # logits of std 2: 20 iterations leave the column sums off by up to about 3% (rows are normalized last, eq. 9)
    logits = jax.random.normal(jax.random.key(0), (64, 4, 4)) * 2.0
    out = streams.composite([np.asarray(hyper.sinkhorn(z, 20), np.float64) for z in logits])
    assert out["min_entry"] > 0 and out["max_row_sum_error"] < 1e-6 and 1e-3 < out["max_col_sum_error"] < 0.1
    assert out["spectral"] <= out["bound"] * (1 + 1e-12)


def test_unconstrained_product_grows_and_stays_below_its_bound():
    H = [np.eye(3) + 0.3 * np.random.default_rng(k).standard_normal((3, 3)) for k in range(40)]
    out = streams.composite(H)
    P = np.eye(3)
    for h in H:
        P = h @ P
    assert out["spectral"] == pytest.approx(np.linalg.norm(P, 2)) and out["spectral"] > 2
    assert out["spectral"] <= out["bound"] * (1 + 1e-12)


def test_model_residual_mappings_at_init_and_perturbed(x64):
    config = tiny_config()
    inputs = measure._inputs(config, 0)
    shc = streams.measure_streams(measure.model_config(config, "shc", 2), inputs, 0)
    assert shc["init"]["spectral"] == 1.0 and shc["init"]["max_row_sum_error"] == 0.0  # H_res = I
    assert shc["perturbed"]["spectral"] != pytest.approx(1.0, abs=1e-3)
    mhc = streams.measure_streams(measure.model_config(config, "mhc", 2), inputs, 0)
    for arm in ("init", "perturbed"):
        assert mhc[arm]["spectral"] <= 1 + 1e-12 and mhc[arm]["min_entry"] > 0
    # 2 blocks x 2 sublayers: at init every mhc H_res is Sinkhorn(I): diagonal e / (e + 3), the rest 1 / (e + 3)
    model = normjax.Transformer(measure.model_config(config, "mhc", 2), rngs=nnx.Rngs(0))
    H = streams.residual_mappings(model, normjax.embed(model, *inputs, "encoder")[0])
    want = (np.ones((4, 4)) + (np.e - 1) * np.eye(4)) / (np.e + 3)
    assert len(H) == 4 and all(np.allclose(h, want, atol=1e-12) for h in H)


@pytest.mark.parametrize("placement", ["pre", "lns"])
def test_block_dev_is_the_spectral_norm_of_the_block_jacobian_minus_identity(placement, x64):
    config = tiny_config()
    got = measure.measure(config, placement, 2, 0)["block_dev"]
    model = normjax.Transformer(measure.model_config(config, placement, 2), rngs=nnx.Rngs(0))
    x = normjax.embed(model, *measure._inputs(config, 0), "encoder")[0]
    for l in range(2):
        f = normjax.block_fn(model, l, "encoder")
        flat, unravel = ravel_pytree(x)
        J = jax.jacfwd(lambda v, f=f, unravel=unravel: ravel_pytree(f(unravel(v)))[0])(flat)
        assert got[l] == pytest.approx(np.linalg.norm(np.asarray(J) - np.eye(flat.size), 2), rel=1e-10)
        x = f(x)


def test_lns_first_block_equals_pre_and_deeper_blocks_are_scaled(x64):
    config = tiny_config()
    pre, lns = (measure.measure(config, p, 2, 0)["block_dev"] for p in ("pre", "lns"))
    assert lns[0] == pytest.approx(pre[0], rel=1e-12)  # l = 1: scale 1
    assert lns[1] != pytest.approx(pre[1], rel=1e-3)


def _results(pre_dev, lns_dev, mhc_excess=0.0, mhc_min=0.1, seeds=3, L=8):
    """Synthetic results at one depth L: ||J_l - I|| = c_seed * (l + 1)^e per placement (e, c per seed)."""

    def dev(e, scale):
        return {"seeds": [[c * (l + 1) ** e for l in range(L)] for c in scale], "mean": [1.0] * L}

    runs = {"pre": {str(L): {"block_dev": dev(pre_dev, [1.0, 1.1, 0.9][:seeds])}}}
    runs["lns"] = {str(L): {"block_dev": dev(lns_dev[0], [lns_dev[1] * c for c in (1.0, 1.1, 0.9)][:seeds])}}
    comp = {"spectral": 1.0 + mhc_excess, "min_entry": mhc_min}
    stream = {str(L): [{"init": comp, "perturbed": comp}] * seeds}
    return {"depths": [L], "num_seeds": seeds, "runs": runs, "streams": {"mhc": stream}}


def test_n1_holds_when_lns_keeps_deep_blocks_farther_from_identity():
    assert lns_identity(_results(-0.5, (-0.2, 1.5)), rules.THRESHOLDS)["verdict"] == "holds"


def test_n1_partly_holds_when_lns_brings_them_closer():
    assert lns_identity(_results(-0.5, (-0.5, 0.5)), rules.THRESHOLDS)["verdict"] == "partly holds"


def test_n1_does_not_hold_when_pre_grows_away_and_lns_is_closer():
    assert lns_identity(_results(0.3, (-0.5, 0.5)), rules.THRESHOLDS)["verdict"] == "does not hold"


def test_n1_without_block_dev_or_lns_is_not_testable():
    results = _results(-0.5, (-0.2, 1.5))
    del results["runs"]["lns"]
    assert lns_identity(results, rules.THRESHOLDS)["verdict"] == NOT_TESTABLE
    results = _results(-0.5, (-0.2, 1.5))
    del results["runs"]["pre"]["8"]["block_dev"]
    assert lns_identity(results, rules.THRESHOLDS)["verdict"] == NOT_TESTABLE


def test_n2_is_a_construction_check_that_can_fail():
    assert mhc_composite(_results(-0.5, (-0.5, 0.5)), rules.THRESHOLDS)["verdict"] == CONSTRUCTION
    assert mhc_composite(_results(-0.5, (-0.5, 0.5), mhc_excess=1e-6), rules.THRESHOLDS)["verdict"] == "does not hold"
    assert mhc_composite(_results(-0.5, (-0.5, 0.5), mhc_min=-0.01), rules.THRESHOLDS)["verdict"] == "does not hold"
    results = _results(-0.5, (-0.5, 0.5))
    del results["streams"]
    assert mhc_composite(results, rules.THRESHOLDS)["verdict"] == NOT_TESTABLE
