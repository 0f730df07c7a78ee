"""GI-Adam's updates against its formula; warmup on half of the stack against the global warmup schedule."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import normjax
from normjax.train import gi_adam, optimizers, schedules
from normjax.train.optimizers import OptimizerSpec

B1, B2, EPS = 0.9, 0.95, 1e-8


def test_gi_adam_first_two_updates_follow_the_formula():
    g1, g2 = {"w": jnp.array([0.5, -2.0, 1e-3])}, {"w": jnp.array([0.1, 1.0, -3.0])}
    opt = gi_adam.scale_by_gi_adam(B1, B2, EPS)
    u1, state = opt.update(g1, opt.init(g1))
    np.testing.assert_allclose(u1["w"], g1["w"] / (jnp.abs(g1["w"]) + EPS), rtol=1e-6)
    u2, _ = opt.update(g2, state)
    nu2 = B2 * g1["w"] ** 2 + (1 - B2) * g2["w"] ** 2  # nu_1 = g_1^2, no bias correction of nu
    mu2 = B1 * (1 - B1) * g1["w"] + (1 - B1) * g2["w"]
    np.testing.assert_allclose(u2["w"], mu2 / (1 - B1**2) / (jnp.sqrt(nu2) + EPS), rtol=1e-6)
    adam = optimizers.direction(OptimizerSpec("adam", B1, B2, EPS))
    a2, _ = adam.update(g2, adam.update(g1, adam.init(g1))[1])
    assert not np.allclose(u2["w"], a2["w"])  # Adam's bias-corrected nu forgets g_1^2 faster


def _params(scan: bool, num_layers: int = 4):
    cfg = normjax.ModelConfig(
        arch="decoder", vocab_size=7, d_model=8, num_heads=2, d_ff=16, num_layers=num_layers, placement="pre",
        max_len=8, scan_layers=scan,
    )  # fmt: skip
    return nnx.split(normjax.Transformer(cfg, rngs=nnx.Rngs(0)), nnx.Param, ...)[1]


def _layer_of(path) -> str:
    names = [gi_adam._key_name(k) for k in path]
    if "layers" in names:
        return names[names.index("layers") + 1]
    return "embedding" if "embedders" in names else "outside"


@pytest.mark.parametrize("part", ["top", "bottom"])
def test_layerwise_warmup_leaves_the_other_half_at_the_peak_lr_from_step_0(part):
    """Under the no-warmup fair control, the untouched half's update is -lr x Adam's from step 0 and the warmed
    half's is 0 at step 0 and ramps linearly over 2H."""
    params = _params(scan=False)
    grads = jax.tree.map(lambda p: jnp.ones_like(p) * 0.3, params)
    spec, adam = OptimizerSpec(gi_adam.layerwise_name(part, 2), B1, B2, EPS), OptimizerSpec("adam", B1, B2, EPS)
    state, ref_state, lr, warm = optimizers.direction(spec).init(params), None, 1e-2, 2 * gi_adam.horizon(B2)
    ref_state = optimizers.direction(adam).init(params)
    for t in range(3):
        u, state = optimizers.updates(spec, grads, state, params, lr, 0.0)
        ref, ref_state = optimizers.updates(adam, grads, ref_state, params, lr, 0.0)
        for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(u), jax.tree.leaves(ref), strict=True):
            layer = _layer_of(path)
            top = layer == "outside" or (layer.isdigit() and int(layer) >= 2)
            ramp = t / warm if top == (part == "top") else 1.0
            np.testing.assert_allclose(x, ramp * y, rtol=1e-6, err_msg=f"{part} {jax.tree_util.keystr(path)} t={t}")


def test_scanned_stack_gets_the_same_masks_per_layer():
    loop, scan = gi_adam.warmed_masks(_params(False), "top"), gi_adam.warmed_masks(_params(True), "top")
    top_loop = [float(m) for p, m in jax.tree_util.tree_leaves_with_path(loop) if _layer_of(p) == "3"]
    scanned = [m for p, m in jax.tree_util.tree_leaves_with_path(scan) if "layers" in jax.tree_util.keystr(p)]
    assert top_loop and all(v == 1.0 for v in top_loop)
    assert all(np.asarray(m).ravel().tolist() == [0.0, 0.0, 1.0, 1.0] for m in scanned)


def test_layerwise_warmup_of_all_equals_the_global_warmup_schedule():
    """'all' under the no-warmup fair control = Adam under the same schedule with a 2H warmup, step by step."""
    params = {"w": jnp.ones((3,)), "b": jnp.zeros((2,))}
    warm = 2 * gi_adam.horizon(B2)
    hp = {"lr": 1e-2, "warmup_init_lr": 0.0, "decay_start": 3 * warm}
    arms = schedules.control_arms("warmup_then_inverse_sqrt", [0, warm], hp)
    spec_all, adam = OptimizerSpec(gi_adam.layerwise_name("all", 2), B1, B2, EPS), OptimizerSpec("adam", B1, B2, EPS)
    s1, s2 = optimizers.direction(spec_all).init(params), optimizers.direction(adam).init(params)
    rng = np.random.default_rng(0)
    for t in range(warm + 5):
        grads = jax.tree.map(lambda p: jnp.asarray(rng.standard_normal(p.shape), p.dtype), params)
        lr0 = schedules.learning_rate("warmup_then_inverse_sqrt", t, arms[0])
        lrw = schedules.learning_rate("warmup_then_inverse_sqrt", t, arms[1])
        u1, s1 = optimizers.updates(spec_all, grads, s1, params, lr0, 0.0)
        u2, s2 = optimizers.updates(adam, grads, s2, params, lrw, 0.0)
        for a, b in zip(jax.tree.leaves(u1), jax.tree.leaves(u2), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-12, err_msg=f"t={t}")


def test_unknown_layerwise_name_is_refused():
    assert gi_adam.layerwise_parts("adam_warmup_middle_2h") is None
    with pytest.raises(ValueError, match="unknown part"):
        gi_adam.warmup_part("middle", 10)
