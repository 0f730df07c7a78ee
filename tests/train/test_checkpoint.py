"""A Ctrl-C during a checkpoint save takes effect once the checkpoint and its manifest are committed."""

import os
import signal
import threading
import types

import jax.numpy as jnp
import numpy as np
import pytest

from normjax.train import checkpoint


def _state():
    return types.SimpleNamespace(
        params={"w": jnp.ones((4, 3))},
        opt_state={"m": jnp.zeros((4, 3))},
        step=jnp.int32(10),
        rng=jnp.zeros((2,), jnp.uint32),
        bad_steps=jnp.int32(0),
        diverged_at=jnp.int32(-1),
    )


@pytest.fixture
def default_sigint():
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_a_ctrl_c_mid_save_raises_after_the_commit(tmp_path, default_sigint):
    ckpt = checkpoint.Checkpointer(str(tmp_path / "checkpoints"), fingerprint="f")
    save = ckpt.manager.save

    def interrupted_save(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)  # the Ctrl-C arrives while orbax writes
        return save(*args, **kwargs)

    ckpt.manager.save = interrupted_save
    with pytest.raises(KeyboardInterrupt):
        ckpt.save(10, _state(), 7)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    ckpt.close()
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["10"]  # committed: no orbax temporary folder left
    assert checkpoint.damage(str(tmp_path / "checkpoints" / "10")) is None
    assert checkpoint.Checkpointer(str(tmp_path / "checkpoints"), fingerprint="f").latest_step() == 10
    assert not [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]


def test_a_save_without_ctrl_c_keeps_the_sigint_handler(tmp_path, default_sigint):
    ckpt = checkpoint.Checkpointer(str(tmp_path / "checkpoints"), fingerprint="f")
    ckpt.save(10, _state(), np.int64(7))
    ckpt.close()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert checkpoint.damage(str(tmp_path / "checkpoints" / "10")) is None
