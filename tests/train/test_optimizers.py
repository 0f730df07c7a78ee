"""Traced-lr optimizers equal optax's own; Muon's routing and training; clipping and the smoothed loss match optax."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

import normjax
from normjax.train import optimizers, steps
from normjax.train.steps import token_losses


def _params_and_grads(seed=0):
    k = jax.random.split(jax.random.key(seed), 4)
    params = {"w": jax.random.normal(k[0], (3, 4)), "b": jax.random.normal(k[1], (4,))}
    grads = [{"w": jax.random.normal(k[2 + i], (3, 4)), "b": jax.random.normal(k[2 + i], (4,))} for i in range(2)]
    return params, grads


def _run_ours(spec, lr, wd, params, grads):
    state = optimizers.direction(spec).init(params)
    for g in grads:
        updates, state = optimizers.updates(spec, g, state, params, jnp.float32(lr), jnp.float32(wd))
        params = optax.apply_updates(params, updates)
    return params


def _run_optax(tx, params, grads):
    state = tx.init(params)
    for g in grads:
        updates, state = tx.update(g, state, params)
        params = optax.apply_updates(params, updates)
    return params


@pytest.mark.parametrize("name", ["adam", "adamw", "sgd", "radam"])
def test_matches_optax(name):
    params, grads = _params_and_grads()
    lr, wd = 1e-2, 0.1 if name == "adamw" else 0.0
    spec = optimizers.OptimizerSpec(name, b1=0.9, b2=0.98, eps=1e-9, momentum=0.8)
    mask = jax.tree.map(lambda p: p.ndim >= 2, params)
    tx = {
        "adam": optax.adam(lr, b1=0.9, b2=0.98, eps=1e-9),
        "adamw": optax.adamw(lr, b1=0.9, b2=0.98, eps=1e-9, weight_decay=wd, mask=mask),
        "sgd": optax.sgd(lr, momentum=0.8),
        "radam": optax.radam(lr, b1=0.9, b2=0.98, eps=1e-9),
    }[name]
    ours, ref = _run_ours(spec, lr, wd, params, grads), _run_optax(tx, params, grads)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(ref), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_clip_by_global_norm_matches_optax_and_zero_means_off():
    _, grads = _params_and_grads()
    g = grads[0]
    clipped, norm = optimizers.clip_by_global_norm(g, jnp.float32(0.5))
    ref, _ = optax.clip_by_global_norm(0.5).update(g, None)
    assert float(norm) == pytest.approx(float(optax.tree.norm(g)), rel=1e-6)
    for a, b in zip(jax.tree.leaves(clipped), jax.tree.leaves(ref), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    same, _ = optimizers.clip_by_global_norm(g, jnp.float32(0.0))
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(same), jax.tree.leaves(g), strict=True))


def test_unknown_optimizer_names_choices():
    with pytest.raises(ValueError, match="adamw"):
        optimizers.OptimizerSpec("lion")


def test_label_smoothing_loss_matches_optax():
    k1, k2 = jax.random.split(jax.random.key(1))
    logits = jax.random.normal(k1, (2, 5, 7))
    targets = jax.random.randint(k2, (2, 5), 0, 7)
    mask = jnp.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    sums = token_losses(logits, targets, mask, 0.1)
    labels = optax.smooth_labels(jax.nn.one_hot(targets, 7), 0.1)
    ref = optax.softmax_cross_entropy(logits, labels)
    nll = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
    assert float(sums["loss"]) == pytest.approx(float((ref * mask).sum()), rel=1e-6)
    assert float(sums["nll"]) == pytest.approx(float((nll * mask).sum()), rel=1e-6)
    assert float(sums["tokens"]) == 8


def _muon_params():
    k = jax.random.split(jax.random.key(3), 3)
    return {
        "embedders": {"decoder": {"table": {"embedding": jax.random.normal(k[0], (20, 16))}}},
        "stacks": {
            "decoder": {
                "layers": {"fc1": {"kernel": jax.random.normal(k[1], (16, 32)), "bias": jnp.zeros(32)}},
                "final_norm": {"scale": jnp.ones(16)},
            },
        },
        "head": {"kernel": jax.random.normal(k[2], (16, 20))},
    }


def test_muon_orthogonalizes_block_matrices_and_adam_updates_the_rest():
    params = _muon_params()
    grads = jax.tree.map(lambda p: jax.random.normal(jax.random.key(p.size), p.shape), params)
    spec = optimizers.OptimizerSpec("muon", b1=0.9, b2=0.98, eps=1e-9, momentum=0.95)
    ours, _ = optimizers.direction(spec).update(grads, optimizers.direction(spec).init(params), params)
    adam, _ = optax.scale_by_adam(b1=0.9, b2=0.98, eps=1e-9).update(grads, optax.scale_by_adam().init(params))
    dims = optimizers.muon_dimensions(params)
    is_dim = lambda x: x is None or isinstance(x, optax.contrib.MuonDimensionNumbers)
    routed = {jax.tree_util.keystr(p): d is not None for p, d in jax.tree_util.tree_leaves_with_path(dims, is_dim)}
    assert [k for k, muon in routed.items() if muon] == ["['stacks']['decoder']['layers']['fc1']['kernel']"]
    for (path, u), a in zip(jax.tree_util.tree_leaves_with_path(ours), jax.tree.leaves(adam), strict=True):
        if routed[jax.tree_util.keystr(path)]:
            # first update, no Nesterov: the orthogonalized gradient, every singular value near 1, at RMS 0.2
            s = np.linalg.svd(np.asarray(u) / (optimizers.MUON_RMS * np.sqrt(32)), compute_uv=False)
            assert s.min() > 0.5 and s.max() < 1.5
            s_grad = np.linalg.svd(np.asarray(grads["stacks"]["decoder"]["layers"]["fc1"]["kernel"]), compute_uv=False)
            assert s_grad.max() / s_grad.min() > 3 * s.max() / s.min()
        else:  # embeddings, head, norms, biases: Adam
            np.testing.assert_allclose(u, a, rtol=1e-6, atol=1e-7)


def test_muon_trains_a_tiny_model_with_a_traced_lr():
    cfg = normjax.ModelConfig(
        arch="decoder", vocab_size=12, d_model=16, num_heads=2, d_ff=32, num_layers=2, max_len=16, dropout=0.0
    )
    model = normjax.Transformer(cfg, rngs=nnx.Rngs(0))
    spec = steps.StepSpec(nnx.graphdef(model), "lm", "constant", optimizers.OptimizerSpec("muon"))
    hp = dict.fromkeys(steps.HPARAMS, 0.0) | dict(lr=1e-2, divergence_loss=1e9, divergence_patience=100.0)
    tokens = jnp.tile(jnp.arange(4, 12), (4, 3))[:, :17]
    batch = {"tokens": tokens[:, :-1], "targets": tokens[:, 1:], "mask": jnp.ones((4, 16), bool)}
    step = jax.jit(steps.vmapped_train_step, static_argnums=0)
    states = [steps.init_state(spec, model, 0, hp | {"lr": lr}) for lr in (1e-2, 0.0)]
    state = jax.tree.map(lambda *xs: jnp.stack(xs), *states)
    batches = jax.tree.map(lambda x: jnp.stack([x, x]), batch)
    losses = []
    for _ in range(15):
        state, metrics = step(spec, state, batches)
        losses.append(np.asarray(metrics["loss"]))
    assert losses[-1][0] < 0.5 * losses[0][0]  # lr 1e-2 learns the cycle
    assert losses[-1][1] == pytest.approx(losses[0][1], rel=1e-6)  # lr 0 (the same compiled step) does not move
