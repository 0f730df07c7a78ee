"""Norm layers compute their formulas (float64, against numpy)."""

import jax.numpy as jnp
import numpy as np
import pytest

import normjax

Z = np.random.default_rng(0).normal(loc=0.3, scale=2.0, size=(3, 7))


def test_layernorm_formula(x64):
    norm = normjax.make_norm("layernorm", 7, eps=1e-3, param_dtype=x64)
    norm.scale.set_value(jnp.arange(1.0, 8.0))
    norm.bias.set_value(jnp.full(7, 0.5))
    c = Z - Z.mean(-1, keepdims=True)
    expected = c / np.sqrt(c.var(-1, keepdims=True) + 1e-3) * np.arange(1.0, 8.0) + 0.5
    np.testing.assert_allclose(norm(jnp.asarray(Z)), expected, rtol=1e-13)


def test_rmsnorm_formula(x64):
    norm = normjax.make_norm("rmsnorm", 7, eps=1e-3, param_dtype=x64)
    expected = Z / np.sqrt((Z**2).mean(-1, keepdims=True) + 1e-3)
    np.testing.assert_allclose(norm(jnp.asarray(Z)), expected, rtol=1e-13)


def test_dyt_formula(x64):
    norm = normjax.make_norm("dyt", 7, dyt_alpha=0.5, param_dtype=x64)
    np.testing.assert_allclose(norm(jnp.asarray(Z)), np.tanh(0.5 * Z), rtol=1e-13)


def test_none_is_identity_and_unknown_kind_raises():
    z = jnp.asarray(Z)
    assert normjax.make_norm("none", 7)(z) is z
    with pytest.raises(ValueError, match="unknown norm kind 'batch'.*layernorm"):
        normjax.make_norm("batch", 7)


def test_scalenorm_formula(x64):
    # Nguyen & Salazar 2019: g x / ||x||, one scalar g initialised to sqrt(d).
    norm = normjax.make_norm("scalenorm", 7, eps=0.0, param_dtype=x64)
    assert norm.g[...].shape == () and float(norm.g[...]) == pytest.approx(7**0.5)
    expected = 7**0.5 * Z / np.linalg.norm(Z, axis=-1, keepdims=True)
    np.testing.assert_allclose(norm(jnp.asarray(Z)), expected, rtol=1e-13)
    norm = normjax.make_norm("scalenorm", 7, eps=1e-2, param_dtype=x64)
    norm.g.set_value(jnp.asarray(0.3))
    expected = 0.3 * Z / np.sqrt((Z**2).sum(-1, keepdims=True) + 1e-2)
    np.testing.assert_allclose(norm(jnp.asarray(Z)), expected, rtol=1e-13)


def test_layernorm_without_bias_has_no_beta(x64):
    norm = normjax.make_norm("layernorm", 7, eps=1e-3, use_bias=False, param_dtype=x64)
    assert norm.bias is None
    norm.scale.set_value(jnp.arange(1.0, 8.0))
    c = Z - Z.mean(-1, keepdims=True)
    np.testing.assert_allclose(
        norm(jnp.asarray(Z)), c / np.sqrt(c.var(-1, keepdims=True) + 1e-3) * np.arange(1.0, 8.0), rtol=1e-13
    )
