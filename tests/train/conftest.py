"""Tiny configs shared by the training tests (d 16, one layer, a few steps)."""

import pytest

from normjax.train.config_io import default_config, set_path

TINY = {
    "model.d_model": 16,
    "model.num_heads": 2,
    "model.d_ff": 32,
    "model.num_layers": 1,
    "model.placement": "post",
    "data.max_len": 16,
    "data.num_train": 400,
    "data.num_valid": 32,
    "data.num_test": 8,
    "train.batch_size": 8,
    "train.lr": 3e-3,
    "train.schedule": "constant",
    "train.warmup_steps": 10,
    "train.num_steps": 40,
    "train.log_every": 10,
    "train.eval_every": 20,
    "train.checkpoint_every": 20,
    "train.bleu_examples": 16,
    "train.divergence_check_every": 5,
}


def make_tiny(**overrides) -> dict:
    """The tiny config as a nested dict, with `section__key=value` overrides."""
    values = default_config().to_dict()
    values.pop("sweep")
    for key, value in (TINY | {k.replace("__", "."): v for k, v in overrides.items()}).items():
        values = set_path(values, key, value)
    return values


@pytest.fixture
def tiny():
    return make_tiny


@pytest.fixture
def tiny_overrides():
    return dict(TINY)
