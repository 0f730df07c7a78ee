"""amplification: results.json schema at a tiny size, Liu et al.'s perturbed set, linear small steps; L1/L2 rules."""

import math

import jax
import ml_collections
import numpy as np
import pytest

from normjax import admin_omega, studies
from normjax.probes import param_probes
from normjax.report import Verdict
from normjax.report.claims import INCONCLUSIVE
from normjax.studies import runner
from normjax.studies.amplification import measure as amplification
from normjax.studies.amplification import verdicts as rules
from normjax.studies.judge import judge
from normjax.train.config_io import ConfigError

KINDS = ("random_sign", "grad_sign")


def tiny_config(**changes):
    c = ml_collections.ConfigDict(
        dict(
            placements=("post", "admin_profiled"),
            depths=(1, 2),
            vocab_size=260,
            d_model=8,
            num_heads=2,
            d_ff=16,
            batch_size=2,
            seq_len=4,
            max_bytes=20_000,
            seed=0,
            num_seeds=3,
            kinds=KINDS,
            eps={"random_sign": 1e-4, "grad_sign": 1e-6},
            scopes=("weights", "branch"),
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
    assert results["kinds"] == list(KINDS) and results["scopes"] == ["weights", "branch"]
    assert results["seeds"] == [0, 1, 2] and results["judged"] == ["weights", "random_sign", "stream"]
    assert len(results["data"]["sha256"]) == 64 and results["data"]["num_bytes"] > 0
    for placement in ("post", "admin_profiled"):
        agg = results["runs"][placement]
        assert agg["N"] == [2, 4]
        for scope in ("weights", "branch"):
            for kind in KINDS:
                for target in ("logits", "stream"):
                    a = agg[scope][kind][target]
                    assert np.array(a["var"]).shape == (3, 2) and len(a["exponent"]) == 3  # per seed
                    np.testing.assert_allclose(a["var_mean"], np.mean(a["var"], axis=0), rtol=1e-6)
    admin = results["runs"]["admin_profiled"]
    assert np.array(admin["omega_last"]["values"]).shape == (3, 2) and len(admin["omega_profiled_deepest"]) == 4
    rows = judge("amplification", results)
    assert [r["claim"] for r in rows] == ["L1", "L2"]
    for row in rows:
        Verdict(**row)
    assert len(saved["figures"]) == 4
    assert any("| grad_sign" in line for line in rules.tables(results))  # the coherent arm is a finding


def test_seed_offset_runs_other_seeds_and_other_batches():
    config = tiny_config(placements=("post",), seed=5, kinds=("random_sign",), scopes=("weights",))
    results = amplification.compute(config, _NoCache())
    assert results["seeds"] == [5, 6, 7]
    first = amplification.compute(tiny_config(placements=("post",), kinds=("random_sign",)), _NoCache())
    var = lambda r: r["runs"]["post"]["weights"]["random_sign"]["logits"]["var"]  # noqa: E731
    assert not np.allclose(var(results), var(first))
    assert not np.array_equal(amplification.batch(config, 0)[0], amplification.batch(config, 1)[0])


class _NoCache:
    def cached(self, key, compute):
        return compute()


def test_batches_are_next_byte_pairs_of_the_corpus():
    config = tiny_config()
    tokens, targets = amplification.batch(config, 0)
    np.testing.assert_array_equal(np.asarray(tokens)[:, 1:], np.asarray(targets)[:, :-1])
    assert np.asarray(tokens).max() < config.vocab_size


# --- the perturbation: Liu et al.'s set and their random sign ----------------------------------------------


def _named(tree):
    return {jax.tree_util.keystr(p): v for p, v in jax.tree_util.tree_flatten_with_path(tree)[0]}


@pytest.mark.parametrize("placement", ["admin", "pre"])
def test_random_sign_touches_exactly_the_non_bias_non_norm_weights_embeddings_included(placement):
    model, _, _ = amplification.build(tiny_config(), placement, 2, 0)
    params = amplification.nnx.state(model, amplification.nnx.Param)
    mask = _named(amplification.scope_mask(params, "weights"))
    dW = _named(param_probes.perturbation(model, eps=1e-4, kind="random_sign", key=jax.random.key(3)))
    expected = {
        name: "bias" not in name.rsplit("[", 1)[-1] and "norm" not in name and "omega" not in name for name in mask
    }
    assert any(v for n, v in expected.items() if "embedding" in n)  # the embedding table is perturbed
    assert any(not v for n, v in expected.items() if "norm" in n)  # norm gains and biases are not
    for name, keep in expected.items():
        assert float(mask[name]) == float(keep), name
        step = np.asarray(dW[name]) * np.asarray(mask[name])
        if keep:  # every entry moves by exactly eps, with a sign that is +1 or -1 about equally often
            np.testing.assert_allclose(np.abs(step), 1e-4, rtol=1e-6)
        else:
            assert not step.any(), name
    signs = np.concatenate([np.sign(np.asarray(v)).ravel() for v in dW.values()])
    assert abs(signs.mean()) < 4 / math.sqrt(signs.size)  # a fair coin: mean 0 within 4 standard errors


def test_random_sign_is_independent_of_the_weights_and_seeded():
    model, _, _ = amplification.build(tiny_config(), "post", 1, 0)
    a = param_probes.perturbation(model, eps=1.0, kind="random_sign", key=jax.random.key(0))
    b = param_probes.perturbation(model, eps=1.0, kind="random_sign", key=jax.random.key(0))
    c = param_probes.perturbation(model, eps=1.0, kind="random_sign", key=jax.random.key(1))
    flat = lambda t: np.concatenate([np.asarray(x).ravel() for x in jax.tree.leaves(t)])  # noqa: E731
    np.testing.assert_array_equal(flat(a), flat(b))
    assert not np.array_equal(flat(a), flat(c))
    assert set(np.unique(flat(a))) == {-1.0, 1.0}  # zero-initialized biases move too (the mask drops them)


def _changes(model, data, eps):
    return amplification.output_changes(
        model, data, KINDS, dict.fromkeys(KINDS, eps), ("weights", "branch"), jax.random.key(0)
    )


def test_no_update_no_change_and_linear_for_tiny_steps():
    model, data, _ = amplification.build(tiny_config(), "post", 2, 0)
    zero = _changes(model, data, 0.0)
    small, double = _changes(model, data, 1e-4), _changes(model, data, 2e-4)
    for scope in ("weights", "branch"):
        for kind in KINDS:
            for target in ("logits", "stream"):
                assert zero[scope][kind][target]["rms"] == 0.0
                assert small[scope][kind][target]["rms"] > 0
                ratio = double[scope][kind][target]["rms"] / small[scope][kind][target]["rms"]
                np.testing.assert_allclose(ratio, 2.0, rtol=2e-2)


def test_branch_scope_moves_only_sublayer_weights():
    model, _, _ = amplification.build(tiny_config(), "admin", 1, 0)
    params = amplification.nnx.state(model, amplification.nnx.Param)
    for name, m in _named(amplification.scope_mask(params, "branch")).items():
        assert float(m) == (1.0 if "'branch'" in name else 0.0), name


# --- the model-selection rule (L1) on synthetic data ---------------------------------------------------------

N = [4, 8, 16, 32, 48, 72]


def test_loglik_difference_picks_the_law_the_data_follow():
    n = np.array(N, float)
    assert rules.loglik_difference(N, 0.3 + 0.02 * n) > 10  # exact linear data: the linear law wins clearly
    assert rules.loglik_difference(N, 0.3 + 0.5 * np.log(n)) < -10
    # scale-free: multiplying the data by a constant does not change the preference
    y = 1 + 0.1 * n + np.sin(n)
    assert rules.loglik_difference(N, 7 * y) == pytest.approx(rules.loglik_difference(N, y))


def _synthetic(laws: dict, ratios=None, closed=None) -> dict:
    """Results whose judged arm has Var = law(N) per seed (a list of per-seed arrays per placement)."""
    runs = {}
    for placement, var_SN in laws.items():
        var_SN = np.asarray(var_SN, float)
        ps = amplification.seed_exponents(N, var_SN)
        arm = {"var": var_SN.tolist(), "var_mean": var_SN.mean(0).tolist(), "exponent": list(ps)}
        runs[placement] = {"N": N, "weights": {"random_sign": {"logits": arm}}}
    if ratios is not None:
        closed = [admin_omega(n) for n in N] if closed is None else closed
        runs["admin_profiled"] |= {
            "omega_last": {"values": [[r * c for c in closed] for r in ratios]},
            "omega_closed_form": [admin_omega(n) for n in N],
        }
    return {
        "kinds": ["random_sign"],
        "scopes": ["weights"],
        "targets": ["logits"],
        "judged": ["weights", "random_sign", "logits"],
        "eps": {"random_sign": 1e-4},
        "num_seeds": len(next(iter(laws.values()))),
        "runs": runs,
    }


def _seeds(law, scales=(1.0, 1.1, 0.9, 1.05), wiggle=0.01):
    """Per-seed copies of law(N) with a seed's own scale and a small deterministic wiggle."""
    n = np.array(N, float)
    return [s * law(n) * (1 + wiggle * np.cos(n + i)) for i, s in enumerate(scales)]


def _verdict(results, claim="L1"):
    return next(r for r in judge("amplification", results) if r["claim"] == claim)


LINEAR = lambda n: 0.2 + 0.05 * n  # noqa: E731
LOG = lambda n: 0.2 + 0.5 * np.log(n)  # noqa: E731


def test_l1_linear_post_and_log_pre_admin_holds():
    results = _synthetic({"post": _seeds(LINEAR), "pre": _seeds(LOG), "admin": _seeds(LOG)})
    row = _verdict(results)
    assert row["verdict"] == "holds", row["measured"]
    assert row["numbers"]["post_loglik_difference"][1] > 0 > row["numbers"]["pre_loglik_difference"][2]
    assert "linear preferred in 4/4 seeds" in row["measured"]


def test_l1_swapped_laws_do_not_hold():
    results = _synthetic({"post": _seeds(LOG), "pre": _seeds(LINEAR), "admin": _seeds(LINEAR)})
    assert _verdict(results)["verdict"] == "does not hold"


def test_l1_seeds_that_disagree_are_inconclusive_never_a_failure():
    # half the seeds follow each law: every interval (each placement's log-likelihood difference, each paired
    # exponent contrast) straddles its threshold
    lin, log = _seeds(LINEAR, (1.0, 1.1)), _seeds(LOG, (1.0, 1.1))
    post, pre, admin = lin + log, log + lin, [lin[0], log[0], lin[1], log[1]]
    d = rules.selection(N, post)
    assert d[0] > 0 > d[2]
    assert _verdict(_synthetic({"post": post, "pre": pre, "admin": admin}))["verdict"] == INCONCLUSIVE


def test_l1_pure_noise_is_inconclusive():
    rng = np.random.default_rng(0)
    noise = [1 + 0.05 * rng.standard_normal(len(N)) for _ in range(8)]
    results = _synthetic({"post": noise, "pre": noise[::-1], "admin": noise[1:] + noise[:1]})
    assert _verdict(results)["verdict"] == INCONCLUSIVE


def test_l1_and_l2_need_three_seeds():
    two = _synthetic({"post": _seeds(LINEAR, (1, 1.1)), "admin_profiled": _seeds(LOG, (1, 1.1))}, ratios=[1, 1])
    assert {r["verdict"] for r in judge("amplification", two)} == {"not testable at this scale"}


def test_findings_hold_deepnorm_and_are_not_l1_rows():
    results = _synthetic({"post": _seeds(LINEAR), "pre": _seeds(LOG), "deepnorm": _seeds(LOG)})
    rows = judge("amplification", results)
    assert "deepnorm" not in next(r for r in rows if r["claim"] == "L1")["numbers"].__repr__()
    found = rules.findings(results)
    assert [f["placement"] for f in found] == ["deepnorm"] and rules._law(found[0]["selection"]) == "log"
    assert any("| deepnorm |" in line for line in rules.tables(results))


# --- L2: the profiled omega's depth law ----------------------------------------------------------------------


def test_l2_scaling_rule():
    laws = {"post": _seeds(LINEAR), "admin_profiled": _seeds(LOG)}
    # the closed form times any constant: same law, another c
    row = _verdict(_synthetic(laws, ratios=[1.3, 1.32, 1.28, 1.31]), "L2")
    assert row["verdict"] == "holds"
    np.testing.assert_allclose(row["numbers"]["prefactor"][0] / row["numbers"]["closed_form_prefactor"], 1.3, rtol=0.03)
    # omega ~ sqrt(1 + N): a faster law than the closed form over N = 4..72
    sqrt_law = [math.sqrt(1 + n) for n in N]
    assert _verdict(_synthetic(laws, ratios=[1, 1.02, 0.98, 1.01], closed=sqrt_law), "L2")["verdict"] == (
        "does not hold"
    )
    # seeds whose laws scatter across the band: inconclusive
    scatter = {"post": _seeds(LINEAR), "admin_profiled": _seeds(LOG)}
    results = _synthetic(scatter, ratios=[1, 1, 1, 1])
    values = np.array(results["runs"]["admin_profiled"]["omega_last"]["values"])
    values *= np.array([[n**e for n in N] for e in (0.1, -0.1, 0.12, -0.08)])
    results["runs"]["admin_profiled"]["omega_last"]["values"] = values.tolist()
    assert _verdict(results, "L2")["verdict"] == INCONCLUSIVE


def test_every_preset_validates_with_three_seeds_and_another_seed():
    from normjax.report.rules import MIN_SEEDS
    from normjax.studies import schema as schemas
    from normjax.studies.amplification import config as presets
    from normjax.studies.seeds import seeds

    for name in ("quick", "standard", "paper"):
        config = presets.get_config(name)
        assert config.num_seeds >= MIN_SEEDS, name
        assert 2 * max(config.depths) >= 72, name  # N up to 72 residual sublayers (L = 36)
        config.seed = 1  # --config.seed=1: seeds 1 .. num_seeds
        schemas.validate(studies.get("amplification"), config)
        assert seeds(config) == list(range(1, 1 + config.num_seeds))
    one_depth = presets.get_config("quick")
    one_depth.depths = (4, 4)
    with pytest.raises(ConfigError, match="2 distinct depths"):
        schemas.validate(studies.get("amplification"), one_depth)
    small_vocab = presets.get_config("quick")
    small_vocab.vocab_size = 100
    with pytest.raises(ConfigError, match="vocab_size"):
        schemas.validate(studies.get("amplification"), small_vocab)


def test_results_of_the_earlier_version_are_not_judged_on_l1():
    old = _synthetic({"post": _seeds(LINEAR), "pre": _seeds(LOG)})
    for placement in ("post", "pre"):  # the earlier layout: {scope: {kind: arm}} with no target level
        arm = old["runs"][placement]["weights"]["random_sign"]["logits"]
        old["runs"][placement] = {"N": N, "branch": {"grad_sign": arm}}
    old |= {"kinds": ["grad_sign"], "scopes": ["branch"], "eps": {"grad_sign": 1e-5}}
    del old["judged"], old["targets"]
    row = _verdict(old)
    assert row["verdict"] == "not testable at this scale" and "rerun the study" in row["measured"]
    assert rules.tables(old)[-2].startswith("| grad_sign (1e-05) of branch | logits | pre |")
