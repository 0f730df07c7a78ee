"""Never stale, compiled once per structure: trained modules, rebound closures, modules, params, pytrees."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

import normjax
from normjax import jacobian
from normjax.jacobian import exact, pure, spectral


def true_norm(fn, x):
    """||d fn / d x||_2 from a fresh jax.jacfwd and NumPy's SVD (no normjax code)."""
    J = np.asarray(jax.jacfwd(fn)(x)).reshape(np.size(fn(x)), np.size(x))
    return np.linalg.norm(J, 2)


class Mlp(nnx.Module):
    def __init__(self, rngs):
        self.fc1, self.fc2 = nnx.Linear(6, 12, rngs=rngs), nnx.Linear(12, 5, rngs=rngs)

    def __call__(self, x):
        return self.fc2(jnp.tanh(self.fc1(x)))


def train(module, x, steps=20):
    opt = nnx.Optimizer(module, optax.adam(0.1), wrt=nnx.Param)
    for _ in range(steps):
        grads = nnx.grad(lambda m: jnp.sum(m(x) ** 2))(module)
        opt.update(module, grads)


def test_module_trained_between_calls_is_never_stale():
    module, x = Mlp(nnx.Rngs(0)), jnp.linspace(-1.0, 1.0, 6)
    graphdef, state = nnx.split(module)
    g = lambda x: nnx.merge(graphdef, state)(x)  # noqa: E731  (the documented closure pattern)
    before = jacobian.spectral_norm(g, x, method="exact")
    np.testing.assert_allclose(before, true_norm(module, x), rtol=1e-12)
    np.testing.assert_allclose(jacobian.spectral_norm(module, x, method="exact"), before, rtol=1e-12)
    train(module, x)
    graphdef, state = nnx.split(module)  # rebinds the names g reads
    want = true_norm(module, x)
    assert abs(want - float(before)) > 1e-3  # training really changed the Jacobian
    for f in (g, module, lambda x: module(x)):
        for method in ("exact", "lanczos", "power"):
            np.testing.assert_allclose(jacobian.spectral_norm(f, x, method=method), want, rtol=1e-8)


def test_rebound_closed_over_array_is_never_stale():
    W = jnp.asarray(np.random.default_rng(0).standard_normal((5, 4)))
    f = lambda x: jnp.tanh(W @ x)  # noqa: E731
    x = jnp.full(4, 0.3)
    first = jacobian.spectral_norm(f, x)
    np.testing.assert_allclose(first, true_norm(f, x), rtol=1e-12)
    W = 5 * W[::-1]
    np.testing.assert_allclose(jacobian.spectral_norm(f, x), true_norm(f, x), rtol=1e-12)
    np.testing.assert_allclose(jacobian.jacobian(f, x), jax.jacfwd(f)(x), rtol=1e-12)


def test_params_argument_and_module_share_one_program():
    W1, W2 = (jnp.asarray(np.random.default_rng(s).standard_normal((3, 4))) for s in (1, 2))
    f = lambda p, x: jnp.sin(p["W"] @ x)  # noqa: E731
    x = jnp.ones(4)
    exact._jacobian_impl.clear_cache()
    for W in (W1, W2):
        J = jacobian.jacobian(f, x, params={"W": W})
        np.testing.assert_allclose(J, jax.jacfwd(lambda x, W=W: f({"W": W}, x))(x), rtol=1e-12)
    assert exact._jacobian_impl._cache_size() == 1


def test_blocks_of_a_model_compile_once_and_follow_training(helpers):
    model = helpers.model(num_layers=3)
    streams = normjax.probe(model, helpers.tokens())[1]["decoder"].streams
    exact._jacobian_impl.clear_cache()
    for l in range(3):
        f = normjax.block_fn(model, l)
        got = jacobian.spectral_norm(f, streams[l][0], method="exact")
        np.testing.assert_allclose(got, true_norm(f, streams[l][0]), rtol=1e-10)
    assert exact._jacobian_impl._cache_size() == 1
    f, x = normjax.block_fn(model, 1), streams[1][0]
    helpers.set_params(model, lambda name, w: 1.5 * w)  # the model changes after f was made
    np.testing.assert_allclose(jacobian.spectral_norm(f, x, method="exact"), true_norm(f, x), rtol=1e-10)
    assert exact._jacobian_impl._cache_size() == 1
    ends = [normjax.stack_fn(model, start) for start in range(3)]
    for start, g in enumerate(ends):
        want = jax.jacfwd(g)(streams[start][0]).reshape(24, 24)
        np.testing.assert_allclose(jacobian.jacobian(g, streams[start][0]), want, rtol=1e-12)
    assert exact._jacobian_impl._cache_size() == 2  # one program for every start


def test_scanned_model_merge_pattern(helpers):
    model = helpers.model(scan_layers=True)
    graphdef, state = nnx.split(model)
    x = normjax.probe(model, helpers.tokens())[1]["decoder"].streams[0][0]
    f = lambda x: normjax.block_fn(nnx.merge(graphdef, state, copy=True), 0)(x)  # noqa: E731
    np.testing.assert_allclose(
        jacobian.spectral_norm(f, x, method="exact"), true_norm(normjax.block_fn(model, 0), x), rtol=1e-10
    )


def test_pytree_inputs_and_outputs():
    f = lambda x: {"y": jnp.tanh(x["a"]) * x["b"][0], "z": x["b"] ** 2}  # noqa: E731
    x = {"a": jnp.arange(3.0), "b": jnp.array([0.5, 2.0])}
    J = jacobian.jacobian(f, x)
    x_N, unravel = jax.flatten_util.ravel_pytree(x)
    want = jax.jacfwd(lambda v: jax.flatten_util.ravel_pytree(f(unravel(v)))[0])(x_N)
    np.testing.assert_allclose(J, want, rtol=1e-12)
    np.testing.assert_allclose(jacobian.spectral_norm(f, x), np.linalg.norm(want, 2), rtol=1e-10)
    with pytest.raises(TypeError, match="pytree"):
        jacobian.jacobian(f, {"a": "text", "b": x["b"]})
    with pytest.raises(TypeError, match="floating"):
        jacobian.jacobian(lambda x: x, jnp.arange(3))


def test_custom_derivative_rules_are_part_of_the_structure():
    def make(scale):
        @jax.custom_jvp
        def h(x):
            return jnp.sin(x)

        h.defjvp(lambda primals, tangents: (h(primals[0]), scale * tangents[0]))
        return h

    x = jnp.ones(3)
    for scale in (1.0, 3.0):  # same printed jaxpr, different rules: never the first rule's result
        np.testing.assert_allclose(jacobian.jacobian(make(scale), x), scale * np.eye(3))


@jax.custom_jvp
def _doubled_tangent(x):
    return jnp.sin(x)


@_doubled_tangent.defjvp
def _doubled_tangent_jvp(primals, tangents):
    return jnp.sin(primals[0]), 2.0 * tangents[0]


def test_a_module_level_defjvp_rule_compiles_once_and_a_closure_rule_never_shares():
    exact._jacobian_impl.clear_cache()
    for shift in (jnp.zeros(3), jnp.ones(3)):  # new closures, one rule: one program
        f = lambda x, s=shift: _doubled_tangent(x + s)  # noqa: E731
        np.testing.assert_allclose(jacobian.jacobian(f, jnp.ones(3)), 2 * np.eye(3))
    assert exact._jacobian_impl._cache_size() == 1

    def make(scale):
        def rule(primals, tangents):  # a closure: its module-level callee is not the rule
            return _doubled_tangent_jvp(primals, tangents)[0], scale * tangents[0]

        h = jax.custom_jvp(lambda x: jnp.sin(x))
        h.defjvp(rule)
        return h

    for scale in (1.0, 3.0):
        np.testing.assert_allclose(jacobian.jacobian(make(scale), jnp.ones(3)), scale * np.eye(3))


RULE_SCALE = 2.0  # read by the rules below at trace time; the tests change it


@jax.custom_jvp
def _scaled_tangent(x):
    return jnp.sin(x)


@_scaled_tangent.defjvp
def _scaled_tangent_jvp(primals, tangents):
    return jnp.sin(primals[0]), RULE_SCALE * tangents[0]


_scaled_by_defjvps = jax.custom_jvp(jnp.sin)
_scaled_by_defjvps.defjvps(lambda t, ans, x: RULE_SCALE * t)


@pytest.mark.parametrize("fn", [_scaled_tangent, _scaled_by_defjvps], ids=["defjvp", "defjvps"])
def test_a_global_read_by_a_rule_is_part_of_the_key(fn, monkeypatch):
    """A rule is traced when its program compiles: a changed global must compile again, never reuse the old."""
    x = jnp.ones(3)
    np.testing.assert_allclose(jacobian.jacobian(fn, x), 2.0 * np.eye(3))
    monkeypatch.setitem(globals(), "RULE_SCALE", 5.0)
    np.testing.assert_allclose(jacobian.jacobian(fn, x), 5.0 * np.eye(3))


class _Holder:
    def __init__(self):
        self.scale = 2.0

    def get(self):
        return self.scale


RULE_CONFIG = types.SimpleNamespace(inner=types.SimpleNamespace(scale=2.0))  # read by the rules below
RULE_TABLE = {"scale": 2.0}
RULE_HOLDER = _Holder()
RULE_PARAM = nnx.Param(jnp.array(2.0))


def _set_rule_scales(value):
    RULE_CONFIG.inner.scale = RULE_TABLE["scale"] = RULE_HOLDER.scale = value
    RULE_PARAM[...] = jnp.array(value)


def _nested_attribute(primals, tangents):
    return jnp.sin(primals[0]), RULE_CONFIG.inner.scale * tangents[0]


def _dict_entry(primals, tangents):
    return jnp.sin(primals[0]), RULE_TABLE["scale"] * tangents[0]


def _method_of_an_object(primals, tangents):
    return jnp.sin(primals[0]), RULE_HOLDER.get() * tangents[0]


def _nnx_param(primals, tangents):
    return jnp.sin(primals[0]), RULE_PARAM[...] * tangents[0]


@pytest.mark.parametrize("rule", [_nested_attribute, _dict_entry, _method_of_an_object, _nnx_param])
def test_a_global_object_a_rule_reads_into_is_part_of_the_key(rule):
    """Mutating a global object (not rebinding it) must not leave the old program's Jacobian in place."""
    fn, x = jax.custom_jvp(jnp.sin), jnp.ones(3)
    fn.defjvp(rule)
    try:
        _set_rule_scales(2.0)
        np.testing.assert_allclose(jacobian.jacobian(fn, x), 2.0 * np.eye(3))
        _set_rule_scales(5.0)
        np.testing.assert_allclose(jacobian.jacobian(fn, x), 5.0 * np.eye(3))
    finally:
        _set_rule_scales(2.0)


def test_power_bound_is_honest_on_a_small_gap():
    s_N = jnp.asarray([1.001, 1.0] + [0.5] * 30)
    f = lambda x: s_N * x  # noqa: E731
    x = jnp.ones(s_N.size)
    with pytest.warns(UserWarning, match="Raise num_iters"):
        s, info = jacobian.spectral_norm(f, x, method="power", num_iters=200, return_info=True)
    assert not info.converged
    assert abs(float(s) - 1.001) <= info.error_bound  # the bound covers the true error
    s, info = jacobian.spectral_norm(f, x, method="lanczos", return_info=True)
    assert info.converged and abs(float(s) - 1.001) <= max(info.error_bound, 1e-15)


@pytest.mark.parametrize("kw", [dict(num_iters=0), dict(num_iters=-1), dict(tol=float("nan")), dict(tol=0.0)])
def test_bad_iteration_arguments_are_errors(kw):
    with pytest.raises(ValueError):
        jacobian.spectral_norm(jnp.sin, jnp.ones(3), method="power", **kw)


def test_stack_fn_rejects_an_empty_or_reversed_range(helpers):
    model = helpers.model(num_layers=4)
    for start, stop in ((3, 1), (2, 2), (-1, 2), (0, 5)):
        with pytest.raises(ValueError, match="start < stop"):
            normjax.stack_fn(model, start, stop)


def test_pure_variants_under_jit_and_vmap():
    W = jnp.asarray(np.random.default_rng(3).standard_normal((4, 4)))
    f = lambda p, x: jnp.tanh(p @ x)  # noqa: E731
    xs = jnp.asarray(np.random.default_rng(4).standard_normal((3, 4)))
    s_B, info = jax.jit(jax.vmap(lambda x: pure.spectral_norm(f, x, params=W, num_iters=500)))(xs)
    assert bool(jnp.all(info.converged))
    for x, s in zip(xs, s_B, strict=True):
        np.testing.assert_allclose(s, spectral.spectral_norm(f, x, params=W, method="exact"), rtol=1e-8)
    top, _ = jax.jit(lambda x: pure.singular_values(f, x, 2, params=W))(xs[0])
    np.testing.assert_allclose(top, np.linalg.svd(jax.jacfwd(lambda x: f(W, x))(xs[0]), compute_uv=False)[:2])


def test_differentiable_spectral_norm_matches_finite_differences():
    rng = np.random.default_rng(5)
    W, x = jnp.asarray(rng.standard_normal((5, 4))), jnp.asarray(rng.standard_normal(4))
    f = lambda p, x: jnp.tanh(p["W"] @ x)  # noqa: E731

    def sigma(W, x):
        return jacobian.differentiable_spectral_norm(f, {"W": W}, x, num_iters=1000)[0]

    def exact_sigma(W, x):
        return true_norm(lambda x: f({"W": W}, x), x)

    np.testing.assert_allclose(sigma(W, x), exact_sigma(W, x), rtol=1e-10)
    gW, gx = jax.grad(sigma, argnums=(0, 1))(W, x)
    h = 1e-6
    for arr, grad, which in ((W, gW, 0), (x, gx, 1)):
        for idx in np.ndindex(arr.shape):
            e = jnp.zeros_like(arr).at[idx].set(h)
            plus, minus = [W, x], [W, x]
            plus[which], minus[which] = arr + e, arr - e
            fd = (exact_sigma(*plus) - exact_sigma(*minus)) / (2 * h)
            np.testing.assert_allclose(grad[idx], fd, rtol=1e-6, atol=1e-8)


def test_closed_over_scalars_and_arrays_are_current():
    x = jnp.ones(3)
    for c in (0.1, 0.1 + 1e-15, 2.0):  # Python scalars become literals: part of the structure
        np.testing.assert_allclose(jacobian.jacobian(lambda x, c=c: jnp.sin(x) * c, x), c * np.diag(np.cos(x)))
    for c in (np.arange(3.0), np.arange(3.0) + 1):  # arrays are arguments: one program, current values
        np.testing.assert_allclose(jacobian.jacobian(lambda x, c=c: jnp.sin(x) * c, x), np.diag(c * np.cos(x)))


def test_host_level_entry_points_refuse_tracers():
    with pytest.raises(TypeError, match="jacobian.pure"):
        jax.jit(lambda x: jacobian.spectral_norm(jnp.sin, x))(jnp.ones(3))
    J = jax.jit(lambda x: jacobian.jacobian(jnp.sin, x))(jnp.ones(3))  # jacobian itself traces
    np.testing.assert_allclose(J, np.diag(np.cos(np.ones(3))))
    s2, stderr = jax.jit(lambda x: pure.frobenius_norm_sq(jnp.sin, x, num_probes=8))(jnp.ones(3))
    np.testing.assert_allclose(s2, 3 * np.cos(1.0) ** 2, rtol=1e-12)  # J diagonal: Rademacher probes are exact
    assert float(stderr) < 1e-12
