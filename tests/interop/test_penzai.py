"""docs/jacobian.md's promises on a penzai Gemma-2-like block (skipped if penzai is absent): the shared promises
of test_promises.py, and its `pz.Parameter` leaves passed as params, read fresh on every call."""

import dataclasses
import functools

import jax
import numpy as np
import pytest
from interop import test_promises
from interop.frameworks import D, T, inputs
from interop.frameworks import penzai as penzai_block

from normjax import jacobian
from normjax.jacobian import exact

N = T * D


@pytest.fixture
def fw():
    """The penzai Framework in place of conftest's equinox/haiku/Linen ones, for the tests taken over below."""
    with jax.enable_x64(True):
        return penzai_block()


# The same tests as the other frameworks, run here on the penzai block (the `fw` fixture above)
test_float64_results_match_jacfwd_and_numpy_svd = test_promises.test_float64_results_match_jacfwd_and_numpy_svd
test_bfloat16_blocks_are_analysed_in_float32 = test_promises.test_bfloat16_blocks_are_analysed_in_float32
test_mixed_dtypes_work_in_the_wider_or_float32 = test_promises.test_mixed_dtypes_work_in_the_wider_or_float32
test_a_jitted_closure_updated_five_times_compiles_once_and_keeps_no_old_weights = (
    test_promises.test_a_jitted_closure_updated_five_times_compiles_once_and_keeps_no_old_weights
)


def test_the_block_holds_parameters_as_non_array_leaves(fw):
    from penzai import pz

    block = fw.init(0)
    leaves = jax.tree.leaves(block)
    params = [leaf for leaf in leaves if isinstance(leaf, pz.Parameter)]
    assert len(params) == 11  # 4 RMSNorm scales, q, k, v, o, the GeGLU's 3 weights: not pytree nodes
    assert not any(isinstance(leaf, pz.Parameter) for leaf in jax.tree.leaves(pz.freeze_params(block)))
    with pytest.raises(TypeError, match=r"type <class 'penzai\.core\.variables\.Parameter'>"):
        jax.jit(fw.apply)(block, inputs())  # jax.jit refuses them as arguments; normjax's calls take them as params


def test_parameters_updated_in_place_are_read_fresh_with_one_compile(fw):
    """The block with its Parameters, penzai's frozen form (`pz.freeze_params`: arrays only) and a closure: each
    call reads the Parameters' current values; an in-place update (what an optimizer step does) compiles nothing."""
    from penzai import pz

    block, x = fw.init(0), inputs()
    frozen = lambda: pz.freeze_params(block)  # the values at the time of the call
    forms = {
        "Parameters as params": lambda: jacobian.jacobian(fw.apply, x, params=block),
        "pz.freeze_params as params": lambda: jacobian.jacobian(fw.apply, x, params=frozen()),
        "closure": lambda: jacobian.jacobian(lambda x: fw.apply(block, x), x),
    }
    exact._jacobian_impl.clear_cache()
    for seed in (0, 1, 2):
        if seed:  # an in-place update of every Parameter, to another block's values
            new = {p.label: p.value for p in pz.unbind_params(fw.init(seed))[1]}
            for p in pz.unbind_params(block)[1]:
                p.value = new[p.label]
        J_ref = np.asarray(fw.jacfwd(block, x)).reshape(N, N)
        for name, J in forms.items():
            np.testing.assert_allclose(J(), J_ref, rtol=1e-12, atol=1e-14, err_msg=f"{name}, update {seed}")
        if seed == 0:
            programs = exact._jacobian_impl._cache_size()
    assert exact._jacobian_impl._cache_size() == programs  # updates reuse the programs of the first version
    # a block of another pytree structure (a new activation object, as each build of penzai's builder makes) but
    # the same computation: the same program
    gelu = functools.partial(jax.nn.gelu, approximate=True)
    rebuilt = pz.select(block).at_instances_of(pz.nn.Elementwise).apply(lambda e: dataclasses.replace(e, fn=gelu))
    assert jax.tree.structure(rebuilt) != jax.tree.structure(block)
    np.testing.assert_allclose(jacobian.jacobian(fw.apply, x, params=rebuilt), J_ref, rtol=1e-12, atol=1e-14)
    assert exact._jacobian_impl._cache_size() == programs
    s, info = jacobian.spectral_norm(fw.apply, x, params=block, method="lanczos", return_info=True)
    assert info.converged and abs(float(s) - np.linalg.norm(J_ref, 2)) <= info.error_bound
