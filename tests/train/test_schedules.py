"""Schedule values: peaks, continuity at the warmup boundary, the inverse-sqrt tail, Noam's peak, fair controls."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from normjax.train.schedules import FAIR_CONTROLS, SCHEDULES, control_arms, control_mismatch, learning_rate


def hp(**kw):
    base = dict(
        lr=1e-3, warmup_steps=100.0, warmup_init_lr=0.0, total_steps=1000.0, end_lr=0.0, d_model=512.0, decay_start=0.0
    )
    return base | kw


def lr_at(kind, steps, **kw):
    return np.asarray(learning_rate(kind, np.asarray(steps, np.float32), hp(**kw)), np.float64)


def test_inverse_sqrt_peak_continuity_and_tail():
    w = 100
    np.testing.assert_allclose(lr_at("inverse_sqrt", [w]), [1e-3], rtol=1e-6)
    # linear ramp up to the peak, continuous at the boundary
    np.testing.assert_allclose(lr_at("inverse_sqrt", [0, 50, 99]), [0.0, 5e-4, 9.9e-4], rtol=1e-6)
    # fairseq tail: lr * sqrt(w / step), so 4x the steps halves the lr
    tail = lr_at("inverse_sqrt", [w, 4 * w, 16 * w, 10_000])
    np.testing.assert_allclose(tail, 1e-3 * np.sqrt(w / np.array([w, 4 * w, 16 * w, 10_000])), rtol=1e-6)


def test_inverse_sqrt_warmup_init_lr():
    got = lr_at("inverse_sqrt", [0, 50, 100], warmup_init_lr=1e-7)
    np.testing.assert_allclose(got, [1e-7, 1e-7 + (1e-3 - 1e-7) / 2, 1e-3], rtol=1e-6)


def test_warmup_zero_starts_at_the_peak():
    np.testing.assert_allclose(
        lr_at("inverse_sqrt", [0, 1, 4, 100], warmup_steps=0.0), [1e-3, 1e-3, 5e-4, 1e-4], rtol=1e-6
    )
    for kind in ("constant", "cosine", "linear"):
        assert lr_at(kind, [0], warmup_steps=0.0)[0] == pytest.approx(1e-3, rel=1e-6)


def test_noam_peak_for_d512_at_4000():
    steps = np.arange(1, 20_000, 7).tolist() + [4000]
    values = lr_at("noam", steps, lr=1.0, warmup_steps=4000.0)
    assert steps[int(np.argmax(values))] == 4000
    assert values.max() == pytest.approx(512**-0.5 * 4000**-0.5, rel=1e-6)
    assert values.max() == pytest.approx(6.988e-4, abs=5e-8)


def test_cosine_matches_optax_with_decay_steps_counting_warmup():
    ref = optax.warmup_cosine_decay_schedule(0.0, 1e-3, 100, decay_steps=1000, end_value=1e-5)
    steps = [0, 1, 50, 99, 100, 101, 500, 999, 1000, 1500]
    np.testing.assert_allclose(lr_at("cosine", steps, end_lr=1e-5), [ref(s) for s in steps], rtol=1e-5, atol=1e-12)


def test_linear_and_constant():
    np.testing.assert_allclose(
        lr_at("linear", [100, 550, 1000, 2000], end_lr=1e-4), [1e-3, 5.5e-4, 1e-4, 1e-4], rtol=1e-6
    )
    np.testing.assert_allclose(lr_at("constant", [0, 50, 100, 10**6]), [0, 5e-4, 1e-3, 1e-3], rtol=1e-6)


def test_hyperparameters_are_traced_one_compile_serves_all():
    traces = []

    @jax.jit
    def f(step, h):
        traces.append(1)
        return learning_rate("inverse_sqrt", step, h)

    for lr, w in [(1e-3, 0.0), (5e-4, 500.0), (2e-3, 4000.0)]:
        h = {k: jnp.float32(v) for k, v in hp(lr=lr, warmup_steps=w).items()}
        assert float(f(jnp.int32(7000), h)) == pytest.approx(lr * np.sqrt(max(w, 1) / 7000), rel=1e-5)
    assert len(traces) == 1


def test_unknown_schedule_names_choices():
    with pytest.raises(ValueError, match="inverse_sqrt"):
        learning_rate("nope", 0, hp())
    assert set(SCHEDULES) == {"constant", "inverse_sqrt", "warmup_then_inverse_sqrt", "noam", "cosine", "linear", "wsd"}


def test_warmup_then_inverse_sqrt_values():
    got = lr_at("warmup_then_inverse_sqrt", [0, 50, 100, 200, 400, 1600], warmup_steps=100.0, decay_start=400.0)
    np.testing.assert_allclose(got, [0.0, 5e-4, 1e-3, 1e-3, 1e-3, 5e-4], rtol=1e-6)
    # no warmup: lr_max from step 0 until decay_start
    np.testing.assert_allclose(
        lr_at("warmup_then_inverse_sqrt", [0, 1, 399, 400, 1600], warmup_steps=0.0, decay_start=400.0),
        [1e-3, 1e-3, 1e-3, 1e-3, 5e-4],
        rtol=1e-6,
    )
    # decay_start before the warmup's end: fairseq's inverse_sqrt
    steps = [0, 50, 100, 400, 1000]
    np.testing.assert_array_equal(
        lr_at("warmup_then_inverse_sqrt", steps, decay_start=0.0), lr_at("inverse_sqrt", steps)
    )


@pytest.mark.parametrize("kind", FAIR_CONTROLS)
@pytest.mark.parametrize("warmups", [(0, 100), (0, 100, 400), (0, 25, 250, 1000)])
def test_fair_control_arms_agree_after_the_warmup(kind, warmups):
    arms = control_arms(kind, warmups, hp(lr=3e-3, warmup_init_lr=1e-7))
    steps = np.arange(3000, dtype=np.float32)
    lrs = [np.asarray(learning_rate(kind, steps, a)) for a in arms]
    for i, j in itertools.combinations(range(len(arms)), 2):
        start = max(warmups[i], warmups[j])
        np.testing.assert_array_equal(lrs[i][start:], lrs[j][start:])
        if warmups[i] == 0:
            assert lrs[i][0] == pytest.approx(3e-3)  # the no-warmup arm starts at the peak
    assert control_mismatch(kind, arms, 3000) is None


def test_fairseq_inverse_sqrt_is_no_fair_control():
    arms = [hp(warmup_steps=0.0), hp(warmup_steps=100.0)]
    assert "step 100" in control_mismatch("inverse_sqrt", arms, 500)
    with pytest.raises(ValueError, match="warmup_then_inverse_sqrt"):
        control_arms("inverse_sqrt", (0, 100), hp())


def test_decay_start_is_a_traced_train_hparam(tiny):
    from normjax.train import job, steps
    from normjax.train.config_io import model_config, parse

    run = parse(tiny(train__schedule="warmup_then_inverse_sqrt", train__warmup_steps=0, train__decay_start=20))
    h = job.hparams(run, model_config(run, 50))
    assert set(h) == set(steps.HPARAMS) and h["decay_start"] == 20
    assert float(learning_rate(run.train.schedule, 30, h)) == pytest.approx(3e-3 * np.sqrt(20 / 30), rel=1e-6)
