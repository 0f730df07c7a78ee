"""The model probes and diagnose's table on equinox, haiku and Linen stacks given as block functions."""

import functools

import numpy as np
from interop.frameworks import D, T, inputs

from normjax.jacobian import exact, spectral
from normjax.probes import foreign
from normjax.studies.diagnose import diagnose_blocks, table

L = 2


def stack(fw):
    """(blocks as closures x -> x, the same as f(params, x) with params, x_0)."""
    params = [fw.init(seed) for seed in range(L)]
    closures = [functools.partial(fw.apply, p) for p in params]
    return closures, params, inputs()


def block_jacobians(fw, params, xs) -> list:
    """d x_{l+1} / d x_l by jax.jacfwd, (T D, T D) each."""
    return [np.asarray(fw.jacfwd(p, a)).reshape(T * D, T * D) for p, a in zip(params, xs, strict=False)]


def test_streams_and_block_norms_match_direct_computation(fw):
    closures, params, x = stack(fw)
    xs = [x]
    for p in params:
        xs.append(fw.apply(p, xs[-1]))
    for got in (foreign.streams(closures, x), foreign.streams([fw.apply] * L, x, params)):
        for a, b in zip(got, xs, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    norms = foreign.stream_norms(closures, x)
    np.testing.assert_allclose(norms["mean"], [np.mean(np.asarray(a) ** 2) for a in xs], rtol=1e-12)
    exact._jacobian_impl.clear_cache()
    got = foreign.block_jacobian_norms([fw.apply] * L, x, params)
    assert exact._jacobian_impl._cache_size() == 1  # every block of one structure: one program
    want = [np.linalg.norm(J, 2) for J in block_jacobians(fw, params, xs)]
    np.testing.assert_allclose(got["block"], want, rtol=1e-10)
    assert got["methods"] == ["exact"]


def test_end_to_end_jacobians_are_products_of_the_blocks(fw):
    closures, params, x = stack(fw)
    out = foreign.end_to_end_jacobians(closures, x)
    J = block_jacobians(fw, params, foreign.streams(closures, x))
    io = J[1] @ J[0]  # d x_2 / d x_0 by the chain rule
    S = np.linalg.svd(io, compute_uv=False)
    np.testing.assert_allclose(out["io_singular_values"], S, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(out["spectral"], [S[0], np.linalg.norm(J[1], 2)], rtol=1e-9)
    np.testing.assert_allclose(out["frobenius_sq"], [np.sum(io**2), np.sum(J[1] ** 2)], rtol=1e-9)
    assert out["exact"]


def test_matrix_free_end_to_end_jacobians_compile_once_for_every_start(fw):
    params = [fw.init(seed) for seed in range(3)]
    closures, x = [functools.partial(fw.apply, p) for p in params], inputs()
    spectral._hutchinson.clear_cache()
    out = foreign.end_to_end_jacobians(closures, x, method="lanczos", top_k=4, num_probes=8)
    assert spectral._hutchinson._cache_size() == 1  # one program for the three starts (was one per start)
    J = block_jacobians(fw, params, foreign.streams(closures, x))
    want = [np.linalg.norm(J[2] @ J[1] @ J[0], 2), np.linalg.norm(J[2] @ J[1], 2), np.linalg.norm(J[2], 2)]
    np.testing.assert_allclose(out["spectral"], want, rtol=1e-8)
    np.testing.assert_allclose(out["io_singular_values"], np.linalg.svd(J[2] @ J[1] @ J[0], compute_uv=False)[:4])
    assert not out["exact"]


def test_diagnose_table_of_a_foreign_stack(fw):
    closures, _, x = stack(fw)
    results = diagnose_blocks(closures, x, name=fw.name, thresholds={"stream_growth": 1e-3, "block_norm": 1e-3})
    text = table.format_table(results)
    lines = text.splitlines()
    assert lines[0].startswith(f"{fw.name}: {L} blocks given as functions, d {D}")
    assert lines[1].split()[:3] == ["layer", "placement", "rms"] and len(lines) >= 4 + L
    assert [row.split()[0] for row in lines[3 : 4 + L]] == ["0", "1", "out"]
    want = foreign.block_jacobian_norms(closures, x)["block"]
    np.testing.assert_allclose(results["stacks"][fw.name]["block_norm"], want, rtol=0)
    assert any("grows" in w for w in results["warnings"]) and any("Jacobian norm" in w for w in results["warnings"])
    assert "final_norm=True" not in text and "probe_steps" not in text
