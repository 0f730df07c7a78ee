"""Model probes: stream norms, norm-site closed forms, gradient norms and output change."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

import normjax
from normjax.jacobian import norm_jacobians
from normjax.probes import model_probes, param_probes


def lm_loss(model, tokens_BT):
    logits = model(tokens_BT[:, :-1])
    return optax.softmax_cross_entropy_with_integer_labels(logits, tokens_BT[:, 1:]).mean()


def test_post_ln_streams_are_normalized(helpers):
    # After a Post-LN block (gamma = 1, beta = 0) each token is zhat: ||zhat||^2 / d is
    # var / (var + eps), just below 1; the embedding (l = 0) is not normalized.
    out = model_probes.stream_norms(helpers.model(placement="post"), helpers.tokens())["decoder"]
    assert out["mean"].shape == (3,)
    assert np.all(out["mean"][1:] < 1) and np.all(out["mean"][1:] > 1 - 1e-3)
    assert np.all(out["std"][1:] < 1e-3) and abs(out["mean"][0] - 1) > 1e-3


def test_padding_mask_excludes_padded_tokens(helpers):
    # Causal attention: real tokens before a padded last position see the same context as
    # without it, so the statistics over real tokens equal those of the truncated batch.
    model, toks = helpers.model(placement="pre"), helpers.tokens(length=4)
    mask = jnp.ones(toks.shape, bool).at[:, -1].set(False)
    padded = model_probes.stream_norms(model, toks, padding_mask=mask)["decoder"]
    truncated = model_probes.stream_norms(model, toks[:, :-1])["decoder"]
    for key in ("mean", "std"):
        np.testing.assert_allclose(padded[key], truncated[key], rtol=1e-12)


# Which parameters the closed form must read at each site: the norm's own scale.
SITE_MODULES = {
    "sandwich": {
        "attn.pre": "attn/norm",
        "attn.branch": "attn/norm2",
        "ffn.pre": "ffn/norm",
        "ffn.branch": "ffn/norm2",
    },
    "branch_post": {"attn.branch": "attn/norm", "ffn.branch": "ffn/norm"},
    "hybrid": {
        "attn.q": "attn/qkv_norm/q",
        "attn.k": "attn/qkv_norm/k",
        "attn.v": "attn/qkv_norm/v",
        "ffn.pre": "ffn/norm",  # HybridNorm normalises the FFN input (its output is the residual)
    },
}


@pytest.mark.parametrize("placement", sorted(SITE_MODULES))
def test_norm_sites_read_each_norms_own_scale(placement, helpers):
    # A distinct constant gamma per norm module makes ||J|| sigma = |gamma| exactly (one token). A
    # per-head site's J is block diagonal: ||J|| = |gamma| / (the smallest head's sigma).
    model = helpers.model(placement=placement)
    gammas = {module: -1.5 - i for i, module in enumerate(SITE_MODULES[placement].values())}

    helpers.set_params(
        model,
        lambda name, w: (
            jnp.full_like(w, gammas[name.removesuffix("/scale")]) if name.removesuffix("/scale") in gammas else w
        ),
    )
    out = model_probes.norm_sites(model, helpers.tokens(batch=1, length=1))["decoder"]
    for layer in out["layers"]:
        assert set(layer) == set(SITE_MODULES[placement])
        for site, module in SITE_MODULES[placement].items():
            stats = layer[site]
            assert stats["exact"] and stats["scale_from"] == "params"
            assert stats["heads"] == (2 if module.startswith("attn/qkv_norm") else 1)
            np.testing.assert_allclose(
                stats["jac_norm"]["mean"] * stats["sigma"]["min"], abs(gammas[module]), rtol=1e-12
            )


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm", "dyt"])
def test_per_head_site_matches_autodiff_of_the_models_own_norm(norm, helpers):
    # HybridNorm's q-norm acts on each head's D/H entries: a token's D x D Jacobian (jacfwd of the
    # model's own module) is block diagonal, and its spectral norm is what norm_sites reports.
    model, toks = helpers.model(placement="hybrid", norm=norm), helpers.tokens(batch=1, length=2)
    rng = np.random.default_rng(1)
    helpers.set_params(model, lambda name, w: w + 0.3 * rng.normal(size=w.shape) if "qkv_norm" in name else w)
    z = normjax.probe(model, toks)[1]["decoder"].norm_inputs[0]["attn.q"]  # (1, T, H, D/H)
    B, T, H, k = z.shape
    norm_module = model.stacks["decoder"].layers[0].attn.branch.qkv_norm["q"]
    J_TDD = jax.vmap(jax.jacfwd(norm_module))(z[0]).reshape(T, H * k, H * k)
    params = model_probes._params_at(model, "attn.q", normjax.layer_params(nnx.state(model, nnx.Param), model)[0])
    closed = model_probes.block_diagonal(norm_jacobians.norm_jacobian(norm, z[0], **params))
    np.testing.assert_allclose(closed, J_TDD, rtol=0, atol=1e-12 * np.abs(J_TDD).max())
    jac_BT, sigma, _ = model_probes.site_closed_form(norm, z, params)
    assert sigma.shape == (B, T, H)
    site = model_probes.norm_sites(model, toks)["decoder"]["layers"][0]["attn.q"]
    np.testing.assert_allclose(site["jac_norm"]["max"], float(jac_BT.max()), rtol=1e-12)
    assert model_probes.check_ln_jacobian_autodiff(model, toks, num_tokens=2)["max_rel_err"] < 1e-12
    true_T = np.linalg.norm(np.asarray(J_TDD), 2, axis=(1, 2))
    if norm == "dyt":  # diagonal Jacobian: the closed form is exact
        np.testing.assert_allclose(jac_BT[0], true_T, rtol=1e-12)
    else:  # random gamma: an upper bound; exact for a constant gamma
        assert np.all(true_T <= np.asarray(jac_BT[0]) * (1 + 1e-12))
        nnx.update(norm_module, {"scale": jnp.full((k,), -1.3)})
        J_const = jax.vmap(jax.jacfwd(norm_module))(z[0]).reshape(T, H * k, H * k)
        const_BT = model_probes.site_closed_form(norm, z, params | {"scale": jnp.full((k,), -1.3)})[0]
        np.testing.assert_allclose(const_BT[0], np.linalg.norm(np.asarray(J_const), 2, axis=(1, 2)), rtol=1e-12)


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm", "dyt"])
def test_closed_forms_match_autodiff_of_the_models_norms(norm, helpers):
    model = helpers.model(placement="sandwich", norm=norm)
    rng = np.random.default_rng(0)
    helpers.set_params(
        model, lambda path, w: w + 0.3 * rng.normal(size=w.shape) if path.endswith(("scale", "alpha")) else w
    )
    out = model_probes.check_ln_jacobian_autodiff(model, helpers.tokens(), num_tokens=3)
    assert out["max_rel_err"] < 1e-12
    assert len(out["decoder"]["layers"]) == 2 and out["decoder"]["final"] is not None
    sites = model_probes.norm_sites(model, helpers.tokens())["decoder"]
    # Random gamma: the closed-form norm is an upper bound, except for DyT's diagonal Jacobian.
    assert sites["layers"][0]["attn.pre"]["exact"] == (norm == "dyt")
    assert sites["final"]["scale_from"] == "ones"


def test_gradient_norms_two_metrics(helpers):
    model = helpers.model(placement="post")
    batches = [helpers.tokens(batch=2, length=4, seed=s) for s in range(4)]
    one = param_probes.grad_norms(model, lm_loss, batches[:1])
    many = param_probes.grad_norms(model, lm_loss, batches)
    assert one["num_batches"] == 1 and many["num_batches"] == 4
    for name, m in one["stacks"]["decoder"].items():
        np.testing.assert_allclose(m["norm_of_mean"], m["mean_of_norms"], rtol=1e-12, err_msg=name)
        np.testing.assert_array_equal(m["std_of_norms"], 0)
    kernels = many["stacks"]["decoder"]["ffn/fc1/kernel"]
    assert kernels["mean_of_norms"].shape == (2,)
    for m in many["stacks"]["decoder"].values():
        assert np.all(m["norm_of_mean"] <= m["mean_of_norms"] * (1 + 1e-12))
    assert np.all(kernels["norm_of_mean"] < kernels["mean_of_norms"])  # batches disagree


def test_rezero_only_alpha_gets_a_gradient_at_init(helpers):
    # R1: with alpha = 0 the branches do not touch the output, so their weights get no gradient.
    model = helpers.model(placement="rezero")
    grads = param_probes.grad_norms(model, lm_loss, [helpers.tokens(length=4)])
    for name, m in grads["stacks"]["decoder"].items():
        if name == "gate":
            assert np.all(m["mean_of_norms"] > 0)
        else:
            np.testing.assert_array_equal(m["mean_of_norms"], 0, err_msg=name)


def test_output_change_is_first_order_in_eps_and_zero_at_zero(helpers):
    model, toks = helpers.model(placement="post"), helpers.tokens()
    change = lambda eps: param_probes.output_change(model, toks, eps=eps, target="stream")
    assert change(0.0)["max"] == 0
    small, double = change(1e-6), change(2e-6)
    assert small["rms"] > 0
    np.testing.assert_allclose(double["rms"] / small["rms"], 2, rtol=1e-4)


def test_grad_sign_update_decreases_the_loss(helpers):
    # Same model structure and shapes as the tests above: the compiled gradient is reused.
    model, batch = helpers.model(placement="post"), helpers.tokens(length=4)
    dW = param_probes.perturbation(model, eps=1e-4, kind="grad_sign", loss_fn=lm_loss, batch=batch)
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    moved = nnx.merge(graphdef, jax.tree.map(jnp.add, params, dW), rest)
    assert lm_loss(moved, batch) < lm_loss(model, batch)
    out = param_probes.output_change(
        model, helpers.tokens(), eps=1e-4, kind="grad_sign", loss_fn=lm_loss, batch=batch, target="stream"
    )
    assert out["relative"] > 0 and out["rms"] <= out["max"]
    with pytest.raises(ValueError, match="needs loss_fn"):
        param_probes.perturbation(model, eps=1e-4, kind="grad_sign")
    assert normjax.stack_names(model) == ("decoder",)


def test_cross_attention_keys_use_the_source_mask(helpers):
    # cross.k / cross.v normalize encoder positions: their statistics skip padded source tokens (here the
    # target is unpadded and as long as the source, so the target mask would silently count them).
    model = helpers.model(arch="encoder_decoder", placement="hybrid")
    src, tgt = helpers.tokens(length=3), helpers.tokens(length=3, seed=1)
    src_mask = jnp.ones(src.shape, bool).at[0, 1:].set(False)
    out = model_probes.norm_sites(model, src, tgt, src_mask=src_mask)["decoder"]["layers"][0]
    z = normjax.probe(model, src, tgt, src_mask=src_mask)[1]["decoder"].norm_inputs[0]["cross.k"]
    layer0 = normjax.layer_params(nnx.state(model, nnx.Param), model, "decoder")[0]
    params = model_probes._params_at(model, "cross.k", layer0)
    jac_BT, sigma, _ = model_probes.site_closed_form(model.cfg.norm, z, params)
    real = np.asarray(src_mask)
    np.testing.assert_allclose(out["cross.k"]["jac_norm"]["mean"], np.asarray(jac_BT)[real].mean(), rtol=1e-12)
    np.testing.assert_allclose(out["cross.k"]["sigma"]["max"], np.asarray(sigma)[real].max(), rtol=1e-12)
    assert not np.isclose(out["cross.k"]["jac_norm"]["mean"], np.asarray(jac_BT).mean(), rtol=1e-6)
