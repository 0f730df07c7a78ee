"""Models with constant Variables (LNS's 1/sqrt(l), the value residual's block-0 flag) train scanned and remat'd."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from model_fixtures import scan_twin, tiny_model

from normjax.train import optimizers, steps

# the regression: jax.grad closes over the consts State, and nnx.scan / nnx.remat refused its Variables
# ("Cannot extract graph node from different trace level"), so these models could not take a train step
CONSTANTS = {"lns": dict(placement="lns"), "value_residual": dict(placement="pre", value_residual=True)}


def _batch(vocab):
    tokens = jax.random.randint(jax.random.key(1), (2, 6), 1, vocab)
    return {"tokens": tokens, "targets": jnp.roll(tokens, -1, axis=1), "mask": jnp.ones((2, 6), bool)}


def _step_and_diagnostics(model, batch):
    # SGD: an update continuous in the gradient (Adam's first step is lr sign(g), which flips on rounding noise)
    spec = steps.StepSpec(nnx.graphdef(model), "lm", optimizer=optimizers.OptimizerSpec("sgd"))
    hp = dict.fromkeys(steps.HPARAMS, 0.0) | dict(
        lr=1e-2, warmup_steps=1, warmup_init_lr=1e-2, total_steps=10, d_model=model.cfg.d_model,
        divergence_loss=1e9, divergence_patience=5,
    )  # fmt: skip
    state = steps.init_state(spec, model, 0, hp)
    _, metrics = jax.jit(steps.train_step, static_argnums=0)(spec, state, batch)
    diag = jax.jit(steps.diagnostics, static_argnums=(0, 1))(spec.graphdef, "lm", state.params, state.consts, batch)
    return metrics, diag


@pytest.mark.parametrize("fields", CONSTANTS.values(), ids=CONSTANTS.keys())
def test_scanned_and_remat_models_take_the_loop_models_step(fields):
    loop = tiny_model(arch="decoder", num_layers=3, **fields)
    remat = tiny_model(arch="decoder", num_layers=3, remat=True, **fields)
    for a, b in zip(jax.tree.leaves(nnx.state(loop)), jax.tree.leaves(nnx.state(remat)), strict=True):
        np.testing.assert_array_equal(a, b)  # the same init: only the execution differs
    batch = _batch(loop.cfg.vocab_size)
    want_metrics, want_diag = _step_and_diagnostics(loop, batch)
    assert np.isfinite(want_metrics["loss"]) and want_metrics["update_norm"] > 0
    for model in (scan_twin(loop), remat, scan_twin(remat)):
        metrics, diag = _step_and_diagnostics(model, batch)
        for k in ("loss", "grad_norm", "update_norm", "param_norm"):
            np.testing.assert_allclose(metrics[k], want_metrics[k], rtol=2e-5, err_msg=k)
        for k in ("grad_norm/decoder", "ffn_grad_norm/decoder"):
            np.testing.assert_allclose(diag[k], want_diag[k], rtol=2e-5, atol=1e-7, err_msg=k)
