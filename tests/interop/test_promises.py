"""docs/jacobian.md's promises on equinox, haiku and Linen blocks: exact values, dtypes, compile once, fresh weights."""

import gc

import jax
import jax.numpy as jnp
import numpy as np
from interop.frameworks import D, T, cast, inputs

from normjax import jacobian
from normjax.jacobian import exact, spectral, traced

N = T * D


def reference_J(fw, params, x):
    """d apply / d x by jax.jacfwd in float64, on the values the function sees."""
    p64, x64 = cast(params, jnp.float64), jnp.asarray(x, jnp.float64)
    return np.asarray(fw.jacfwd(p64, x64)).reshape(N, N)


def test_float64_results_match_jacfwd_and_numpy_svd(fw):
    x = inputs()
    exact._jacobian_impl.clear_cache()
    for seed in range(3):  # three blocks of one structure: one compiled program, each its own weights
        params = fw.init(seed)
        J_ref = reference_J(fw, params, x)
        np.testing.assert_allclose(jacobian.jacobian(fw.apply, x, params=params), J_ref, rtol=1e-12, atol=1e-14)
    assert exact._jacobian_impl._cache_size() == 1
    S_ref = np.linalg.svd(J_ref, compute_uv=False)
    s, info = jacobian.spectral_norm(fw.apply, x, params=params, method="exact", return_info=True)
    assert info.dtype == "float64" and abs(float(s) - S_ref[0]) <= info.error_bound
    s, info = jacobian.spectral_norm(fw.apply, x, params=params, method="lanczos", return_info=True)
    assert info.converged and abs(float(s) - S_ref[0]) <= info.error_bound
    top, info = jacobian.singular_values(fw.apply, x, 3, params=params, method="lanczos", return_info=True)
    assert np.all(np.abs(np.asarray(top) - S_ref[:3]) <= info.error_bound)


def test_bfloat16_blocks_are_analysed_in_float32(fw):
    params, x = cast(fw.init(0), jnp.bfloat16), inputs(dtype=jnp.bfloat16)
    S_ref = np.linalg.svd(reference_J(fw, params, x), compute_uv=False)  # float64 on the bf16-rounded values
    s_e, info_e = jacobian.spectral_norm(fw.apply, x, params=params, method="exact", return_info=True)
    assert info_e.dtype == "float32" and s_e.dtype == jnp.float32
    assert abs(float(s_e) - S_ref[0]) <= info_e.error_bound  # the exact bound covers bf16's rounding of J
    assert jacobian.jacobian(fw.apply, x, params=params).dtype == jnp.float32
    for method in ("lanczos", "power"):  # matrix-free too: f's own bfloat16 rounding is part of the bound
        s, info = jacobian.spectral_norm(fw.apply, x, params=params, method=method, return_info=True)
        assert info.dtype == "float32" and abs(float(s) - S_ref[0]) <= info.error_bound and info.rounding > 0
    top, info = jacobian.singular_values(fw.apply, x, 3, params=params, method="lanczos", return_info=True)
    assert np.all(np.abs(np.asarray(top, np.float64) - S_ref[:3]) <= info.error_bound)


def test_mixed_dtypes_work_in_the_wider_or_float32(fw):
    params, x32 = fw.init(0), inputs(dtype=jnp.float32)
    S_ref = np.linalg.svd(reference_J(fw, params, x32), compute_uv=False)
    # float32 x, float64 weights: a float64 f(x) (Lanczos raised a while_loop carry TypeError here before)
    s, info = jacobian.spectral_norm(fw.apply, x32, params=params, method="lanczos", return_info=True)
    assert info.dtype == "float64" and info.converged and abs(float(s) - S_ref[0]) <= info.error_bound
    f = lambda p, x: fw.apply(p, x.astype(jnp.bfloat16)).astype(jnp.float32)  # mixed precision inside
    p16 = cast(params, jnp.bfloat16)
    S16 = np.linalg.svd(reference_J(fw, p16, x32.astype(jnp.bfloat16)), compute_uv=False)  # the rounded values
    for method in ("lanczos", "power"):
        s, info = jacobian.spectral_norm(f, x32, params=p16, method=method, return_info=True)
        assert info.dtype == "float32" and s.dtype == jnp.float32 and abs(float(s) - S16[0]) <= info.error_bound


def live_bytes() -> int:
    gc.collect()
    return sum(a.nbytes for a in jax.live_arrays())


def update_five_times(fw, x, analyse) -> int:
    """Bytes of live arrays gained from the 2nd to the 5th update of a jitted closure over new weights."""
    live = []
    for step in range(5):  # a weight update, then the closure a user writes over the new weights
        params = fw.init(step)
        analyse(fw.jit(lambda x, params=params: fw.apply(params, x)), params)
        del params
        live.append(live_bytes())
    return live[-1] - live[1]


def test_a_jitted_closure_updated_five_times_compiles_once_and_keeps_no_old_weights(fw):
    x = inputs()
    own = update_five_times(fw, x, lambda f, _: f(x).block_until_ready())  # what the framework's jit keeps
    spectral._lanczos.clear_cache()
    before = len(traced._CANONICAL)

    def analyse(f, params):
        s, info = jacobian.spectral_norm(f, x, method="lanczos", return_info=True)
        S_ref = np.linalg.svd(reference_J(fw, params, x), compute_uv=False)
        assert abs(float(s) - S_ref[0]) <= info.error_bound  # the current weights, never the first ones

    grown = update_five_times(fw, x, analyse)
    assert spectral._lanczos._cache_size() == 1  # one compile for five versions
    assert len(traced._CANONICAL) - before <= 1  # one cached structure
    assert grown <= own  # normjax keeps no version's weights alive (equinox's filter_jit cache keeps some itself)
