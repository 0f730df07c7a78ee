"""The warmup-stable-decay schedule against a numpy port of MiniCPM's `WarmupStableDrop` (OpenBMB, bmtrain)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from normjax.train.schedules import SCHEDULES, learning_rate


def _warmup_stable_drop(s, base_lr, warmup_iter, end_iter, drop_iter):
    """`WarmupStableDrop.get_lr` for one step s (no resume): s / W lr, lr, then lr (0.1 + 0.9 (end - s) / drop)."""
    if s < warmup_iter:
        return base_lr * s / warmup_iter
    if s > end_iter - drop_iter:
        return base_lr * (0.1 + max(0.9 * (end_iter - s) / drop_iter, 0))
    return base_lr


def _hp(**kw):
    base = dict(lr=1e-3, warmup_steps=100.0, warmup_init_lr=0.0, total_steps=1000.0, end_lr=1e-4, decay_start=900.0)
    return base | kw


@pytest.mark.parametrize("warmup, total, drop", [(100, 1000, 100), (10, 400, 40), (50, 2000, 500)])
def test_wsd_equals_minicpm_warmup_stable_drop(warmup, total, drop):
    """end_lr = 0.1 lr and decay_start = total - drop is the authors' scheduler, at every step and past the end."""
    lr = 3e-3
    steps = np.arange(total + 20)
    want = [_warmup_stable_drop(int(s), lr, warmup, total, drop) for s in steps]
    hp = _hp(lr=lr, warmup_steps=float(warmup), total_steps=float(total), end_lr=0.1 * lr, decay_start=total - drop)
    got = np.asarray(learning_rate("wsd", steps.astype(np.float32), hp), np.float64)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=0)


def test_wsd_phases():
    """Warmup ramps from warmup_init_lr, the stable phase holds lr exactly, the decay falls monotonically to end_lr."""
    hp = _hp(warmup_init_lr=1e-5)
    lrs = np.asarray(learning_rate("wsd", np.arange(1101, dtype=np.float32), hp), np.float64)
    assert lrs[0] == pytest.approx(1e-5)
    assert np.all(np.diff(lrs[:101]) > 0)
    assert np.all(lrs[100:901] == np.float32(1e-3))  # constant, bit for bit
    assert np.all(np.diff(lrs[900:1001]) < 0)
    assert lrs[950] == pytest.approx((1e-3 + 1e-4) / 2, rel=1e-5)  # linear: half way at the decay's midpoint
    np.testing.assert_allclose(lrs[1000:], 1e-4, rtol=1e-6)
    # decay_start before the warmup's end: the decay starts when the warmup ends
    early = np.asarray(learning_rate("wsd", np.float32(100.0), _hp(decay_start=0.0)))
    assert float(early) == pytest.approx(1e-3, rel=1e-6)


def test_wsd_hyperparameters_are_traced():
    """One compiled program serves every lr, warmup, decay_start and total_steps."""
    traces = []

    @jax.jit
    def f(step, h):
        traces.append(1)
        return learning_rate("wsd", step, h)

    for decay_start, total in [(900.0, 1000.0), (300.0, 500.0), (50.0, 80.0)]:
        h = {k: jnp.float32(v) for k, v in _hp(decay_start=decay_start, total_steps=total, warmup_steps=10.0).items()}
        mid = (decay_start + total) / 2
        assert float(f(jnp.float32(mid), h)) == pytest.approx((1e-3 + 1e-4) / 2, rel=1e-5)
    assert len(traces) == 1
    assert "wsd" in SCHEDULES
