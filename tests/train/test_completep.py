"""CompleteP's optimizer rules: multipliers equal Table 1, one step equals Adam by hand, the default is unchanged."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

import normjax
from normjax.train import completep, job, optimizers, steps
from normjax.train.config_io import ConfigError, model_config, parse

B1, B2, LR, WD = 0.9, 0.98, 1e-2, 0.1


def _flat(tree) -> dict:
    """{"stacks/decoder/...": leaf} of an nnx.State."""
    name = lambda k: str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k))))
    return {"/".join(map(name, path)): x for path, x in jax.tree_util.tree_leaves_with_path(tree)}


@pytest.mark.parametrize("alpha", [1.0, 0.5])
@pytest.mark.parametrize("depth", [2, 3, 8, 48])
def test_multipliers_equal_the_formula(depth, alpha):
    """Table 1, m_N = 256 / 64, m_L = L / 2: hidden lr m_N^-1 m_L^(alpha-1), hidden wd m_N, eps m_N^-1 m_L^-alpha."""
    cfg = normjax.ModelConfig(
        d_model=256,
        num_heads=4,
        d_ff=512,
        num_layers=depth,
        branch_multiplier_alpha=alpha,
        branch_multiplier_base_depth=2,
    )
    cp = completep.from_model(cfg, base_width=64)
    m_N, m_L = 4.0, depth / 2
    eps = 1 / (m_N * m_L**alpha)
    want = {
        "embedding": (1.0, eps, 1.0),
        "hidden_weight": (m_L ** (alpha - 1) / m_N, eps, m_N),
        "hidden_other": (m_L ** (alpha - 1), eps, 0.0),
        "outside": (1.0, eps, 0.0),
    }
    for group, values in want.items():
        assert cp.multipliers(group, "decoder") == pytest.approx(values, rel=1e-14)
    # CompleteP (alpha = 1): the hidden lr does not depend on depth at all; eps falls as 1 / L
    if alpha == 1.0:
        assert cp.multipliers("hidden_weight", "decoder")[0] == 1 / m_N


def test_each_stack_has_its_own_depth():
    cfg = normjax.ModelConfig(arch="encoder_decoder", num_layers=2, num_decoder_layers=6, branch_multiplier_alpha=1.0)
    cp = completep.from_model(cfg)
    assert cp.depth_multipliers == (("encoder", 2.0), ("decoder", 6.0))
    assert cp.multipliers("hidden_weight", "encoder")[1] == pytest.approx(1 / 2)
    assert cp.multipliers("hidden_weight", "decoder")[1] == pytest.approx(1 / 6)


def _step(cfg, spec, tokens):
    """(params before, params after one train_step, grads) of a decoder LM on `tokens` (one compiled program)."""
    model = normjax.Transformer(cfg, rngs=nnx.Rngs(0))
    step_spec = steps.StepSpec(nnx.graphdef(model), "lm", "constant", spec)
    hp = {k: 0.0 for k in steps.HPARAMS} | {"lr": LR, "weight_decay": WD, "divergence_loss": 1e9}
    state = steps.init_state(step_spec, model, 0, hp | {"divergence_patience": 9})
    batch = {"tokens": tokens[:, :-1], "targets": tokens[:, 1:], "mask": jnp.ones_like(tokens[:, 1:], bool)}

    def step_and_grads(state):
        def loss(params):
            model = nnx.merge(step_spec.graphdef, params, state.consts)
            sums = steps.token_losses(*steps.forward(model, "lm", batch), 0.0)
            return sums["loss"] / sums["tokens"]

        return steps.train_step(step_spec, state, batch)[0].params, jax.grad(loss)(state.params)

    new, grads = jax.jit(step_and_grads)(state)
    return _flat(state.params), _flat(new), _flat(grads)


def _adam_by_hand(g, p, eps, lr_mult, wd_mult):
    """numpy float64: one AdamW step from zero moments, lr and weight decay times their group multipliers."""
    g, p = np.float64(g), np.float64(p)
    m_hat, v_hat = (1 - B1) * g / (1 - B1), (1 - B2) * g**2 / (1 - B2)
    return p - LR * lr_mult * (m_hat / (np.sqrt(v_hat) + eps) + WD * wd_mult * p)


def test_one_adamw_step_equals_the_hand_computation():
    """CompleteP (alpha = 1), L = 4 scanned blocks over L_base = 1 and d = 8 over a base width 4: m_L = 4, m_N = 2.
    eps = 0.08 is near |g| here, so the scaled eps (0.08 m_N^-1 m_L^-1) changes the step visibly."""
    cfg = normjax.ModelConfig(
        vocab_size=13,
        d_model=8,
        num_heads=2,
        d_ff=16,
        num_layers=4,
        max_len=8,
        scan_layers=True,
        branch_multiplier_alpha=1.0,
    )
    eps = 0.08
    spec = optimizers.OptimizerSpec("adamw", B1, B2, eps, completep=completep.from_model(cfg, base_width=4))
    tokens = jax.random.randint(jax.random.key(1), (4, 8), 0, 13)
    before, after, grads = _step(cfg, spec, tokens)
    m_N, m_L = 2.0, 4.0
    cases = {  # name: (lr multiplier, weight-decay multiplier)
        "stacks/decoder/layers/ffn/branch/fc1/kernel/value": (1 / m_N, m_N),  # hidden weights: m_L^0
        "embedders/decoder/table/embedding/value": (1.0, 1.0),  # embedding (and the tied head)
        "stacks/decoder/layers/attn/norm/scale/value": (1.0, 0.0),  # hidden gains: m_L^0, no decay
        "stacks/decoder/final_norm/bias/value": (1.0, 0.0),  # outside the blocks
    }
    for name, (lr_mult, wd_mult) in cases.items():
        want = _adam_by_hand(grads[name], before[name], eps / (m_N * m_L), lr_mult, wd_mult)
        np.testing.assert_allclose(after[name], want, rtol=2e-6, atol=1e-8, err_msg=name)
        standard = _adam_by_hand(grads[name], before[name], eps, 1.0, float(np.ndim(before[name]) >= 2))
        assert not np.allclose(after[name], standard, rtol=1e-4, atol=0), name  # the test tells them apart


@jax.jit
def _reference_update(grads, params):
    """The optimizer update as written before CompleteP: optax Adam, then -lr (u + wd p) on matrices."""
    adam = optax.scale_by_adam(b1=B1, b2=B2, eps=1e-9)
    u, _ = adam.update(grads, adam.init(params), params)
    one = lambda u, p: (-LR * (u + (WD * p if p.ndim >= 2 else jnp.zeros_like(p)))).astype(p.dtype)
    return jax.tree.map(one, u, params)


@functools.partial(jax.jit, static_argnums=0)
def _update(spec, grads, params):
    return optimizers.updates(spec, grads, optimizers.direction(spec).init(params), params, LR, WD)[0]


def test_default_update_is_unchanged(tiny):
    """The default config builds the same spec as before (no CompleteP), and its update is bit-identical to the
    pre-CompleteP formula. CompleteP at the base shape (m_N = m_L = 1) equals it to float32 rounding: optax's Adam
    on a multi_transform's sub-trees is fused, and so rounded, differently from Adam on the whole tree."""
    run = parse(tiny(train__optimizer="adamw", train__weight_decay=WD))
    cfg = model_config(run, 11)
    model = normjax.Transformer(cfg, rngs=nnx.Rngs(0))
    t = run.train
    spec = job.step_spec(run, model, "seq2seq").optimizer
    assert spec == optimizers.OptimizerSpec("adamw", t.b1, t.b2, t.eps, t.momentum, t.nesterov)
    params = nnx.state(model, nnx.Param)
    grads = jax.tree.map(lambda p: jax.random.normal(jax.random.key(p.size), p.shape, p.dtype), params)
    spec = optimizers.OptimizerSpec("adamw", B1, B2, 1e-9)
    init = jax.eval_shape(optimizers.direction(spec).init, params)
    assert jax.tree.structure(init) == jax.tree.structure(optax.scale_by_adam(B1, B2, 1e-9).init(params))
    base = completep.from_model(cfg.replace(branch_multiplier_alpha=1.0))
    assert base.depth_multipliers == (("encoder", 1.0), ("decoder", 1.0)) and base.width_multiplier == 1.0
    at_base = _update(optimizers.OptimizerSpec("adamw", B1, B2, 1e-9, completep=base), grads, params)
    ours, reference = _update(spec, grads, params), _reference_update(grads, params)
    for a, b, c in zip(*map(jax.tree.leaves, (ours, reference, at_base)), strict=True):
        assert np.array_equal(a, b)
        np.testing.assert_allclose(c, a, rtol=4 * np.finfo(np.float32).eps, atol=0)


def test_config_selects_completep(tiny):
    run = parse(
        tiny(
            model__branch_multiplier_alpha=1.0,
            model__num_layers=2,
            train__optimizer="adamw",
            train__parametrization="completep",
            train__base_width=8,
        )
    )
    cfg = model_config(run, 11)
    spec = job.step_spec(run, normjax.Transformer(cfg, rngs=nnx.Rngs(0)), "seq2seq").optimizer
    assert spec.completep == completep.CompleteP(1.0, 2.0, (("encoder", 2.0), ("decoder", 2.0)))


@pytest.mark.parametrize(
    "overrides, match",
    [
        (dict(train__parametrization="complete"), "valid choices: standard, completep"),
        (dict(train__parametrization="completep"), "needs config.model.branch_multiplier_alpha"),
        (dict(train__parametrization="completep", model__branch_multiplier_alpha=2.0), r"in \[0.5, 1\]"),
        (dict(train__parametrization="completep", model__branch_multiplier_alpha=1.0), None),
        (
            dict(train__parametrization="completep", model__branch_multiplier_alpha=1.0, train__optimizer="sgd"),
            "needs config.train.optimizer 'adam' or 'adamw'",
        ),
        (dict(train__base_width=64), "base_width=64 needs config.train.parametrization='completep'"),
        (dict(train__base_width=-1), "must be >= 0"),
    ],
)
def test_bad_config_values_raise(tiny, overrides, match):
    if match is None:
        assert parse(tiny(**overrides)).train.parametrization == "completep"
        return
    with pytest.raises(ConfigError, match=match):
        parse(tiny(**overrides))


def test_bad_direct_values_raise():
    with pytest.raises(ValueError, match=r"alpha=2 is invalid: must be in \[0.5, 1\]"):
        completep.CompleteP(alpha=2)
    with pytest.raises(ValueError, match="finite and > 0"):
        completep.CompleteP(width_multiplier=0.0)
    with pytest.raises(ValueError, match="not optimizer 'muon'"):
        optimizers.OptimizerSpec("muon", completep=completep.CompleteP())
    with pytest.raises(ValueError, match="branch_multiplier_alpha"):
        completep.from_model(normjax.ModelConfig())
    with pytest.raises(ValueError, match="no rule for parameter extra/w"):
        completep.CompleteP().labels({"extra": {"w": jnp.zeros((2, 2))}})
