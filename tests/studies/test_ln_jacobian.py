"""ln_jacobian at a tiny size: results schema, verdict rows, wirings, closed-form LN Jacobians."""

import jax
import ml_collections
import numpy as np
import pytest
from flax import nnx

import normjax
from normjax.jacobian import norm_jacobians, probes
from normjax.report import CLAIMS, VERDICTS
from normjax.report.judge import judge
from normjax.studies import ln_jacobian, ln_jacobian_checks, runner


def _tiny():
    c = ml_collections.ConfigDict()
    c.placements = ("post", "pre")
    c.settings = ("theory", "real")
    c.vocab_size, c.d_model, c.num_heads, c.d_ff, c.num_layers = 31, 32, 2, 64, 3
    c.batch_size, c.seq_len, c.num_seeds = 2, 8, 2
    c.num_check_tokens, c.gamma_noise = 2, 0.3
    return c


def test_ln_jacobian_smoke(tmp_path):
    saved = runner.run_study("ln_jacobian", str(tmp_path), _tiny(), ln_jacobian.compute, ln_jacobian.plot)
    results = saved["results"]
    assert (tmp_path / "ln_jacobian" / "ln_sigma.png").exists()
    assert (tmp_path / "ln_jacobian" / "ln_jac.png").exists()
    for setting in ("theory", "real"):
        post, pre = (results["runs"][setting][p] for p in ("post", "pre"))
        assert set(post["sites"]) == {"attn.post", "ffn.post"} and post["final"] is None
        assert set(pre["sites"]) == {"attn.pre", "ffn.pre"} and pre["final"] is not None
        for site in post["sites"].values():
            assert len(site["sigma_mean"]) == len(site["jac_mean"]) == 3
            # gamma = 1 at init: the norm is 1/sigma per token, so its mean is >= 1 / mean sigma
            assert np.all(np.array(site["jac_mean"]) >= 1 / np.array(site["sigma_mean"]) - 1e-6)
    rows = {row["claim"]: row for row in judge("ln_jacobian", results)}
    assert set(rows) == {"X4", "S1", "S2", "X1"} <= set(CLAIMS)
    assert all(row["verdict"] in VERDICTS for row in judge("ln_jacobian", results))
    # Math guarantees at any size: the wirings are their formulas, the closed form is the Jacobian.
    assert rows["X1"]["verdict"] == "holds", rows["X1"]
    assert rows["X4"]["numbers"]["matrix_rel_err"] <= 1e-4
    assert rows["X4"]["numbers"]["spectral_rel_err"] <= 1e-4
    assert rows["X4"]["numbers"]["ratio_min"] <= 1 + 1e-4  # max|gamma|/sigma is an upper bound


@pytest.mark.parametrize("placement", ["sandwich", "hybrid"])
def test_site_stats_match_probe_norm_sites(placement):
    # hybrid: per-head QKV-norm sites, one ||J|| per token (the largest head's), sigma per (token, head)
    cfg = normjax.ModelConfig(
        arch="encoder", vocab_size=31, d_model=32, num_heads=2, d_ff=64, num_layers=3, placement=placement, max_len=8
    )
    model = normjax.Transformer(cfg, rngs=nnx.Rngs(0))
    tokens = jax.random.randint(jax.random.key(0), (2, 8), 0, 31)
    ours = ln_jacobian.site_stats(model, normjax.probe(model, tokens)[1]["encoder"])
    theirs = probes.norm_sites(model, tokens)["encoder"]
    for l, sites in enumerate(theirs["layers"]):
        for site, stats in sites.items():
            np.testing.assert_allclose(ours["sites"][site][l]["sigma"], stats["sigma"]["mean"], rtol=1e-5)
            np.testing.assert_allclose(ours["sites"][site][l]["jac"], stats["jac_norm"]["mean"], rtol=1e-5)
    if theirs["final"] is not None:
        np.testing.assert_allclose(ours["final"]["sigma"], theirs["final"]["sigma"]["mean"], rtol=1e-5)
    if placement == "hybrid":
        sp = normjax.probe(model, tokens)[1]["encoder"]
        check = ln_jacobian_checks.autodiff_spectral(model, sp, num_tokens=2, gamma_noise=0.3)
        assert {site for _, site in check["per_head_sites_skipped"]} == {"attn.q", "attn.k", "attn.v"}
        assert check["max_rel_err"] < 1e-4 and set(check["per_layer"]) == {"ffn.pre"}


def test_autodiff_jacobian_equals_closed_form_on_a_large_batch():
    # 64 x 128 x 128 Jacobians: the size at which jit(vmap(jacfwd)) went wrong on CPU.
    k1, k2 = jax.random.split(jax.random.key(0))
    z_ND = 3 * jax.random.normal(k1, (64, 128))
    gamma_ND = 1 + 0.3 * jax.random.normal(k2, (64, 128))
    J_auto = ln_jacobian_checks._autodiff("layernorm", 128, 1e-5, gamma_ND, z_ND)
    J_closed = norm_jacobians.layernorm_jacobian(z_ND, gamma_ND, 1e-5)
    np.testing.assert_allclose(J_auto, J_closed, atol=1e-6)
