"""Bad configs fail before any compute: non-zero exit, the key named, nothing written."""

import os
import pathlib
import subprocess
import sys

import pytest

from normjax.train.config_io import ConfigError, parse

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (dict(train__optimizer="lion"), "config.train.optimizer"),
        (dict(train__warmup_steps=-1), "config.train.warmup_steps"),
        (dict(train__schedule="exp"), "config.train.schedule"),
        (dict(model__placement="middle"), "placement"),
        (dict(model__arch="encoder"), "config.model.arch"),
        (dict(train__checkpoint_every=15), "config.train.checkpoint_every"),
        (dict(train__weight_decay=0.1), "config.train.weight_decay"),
        (dict(data__task="iwslt14", data__path="/nonexistent"), "config.data.path"),
    ],
)
def test_invalid_values_name_the_key(tiny, overrides, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        parse(tiny(**overrides))


def test_choices_and_unknown_keys_are_listed(tiny):
    with pytest.raises(ConfigError, match="adam, adamw, sgd, radam"):
        parse(tiny(train__optimizer="lion"))
    config = tiny()
    config["train"]["lrr"] = 1.0
    with pytest.raises(ConfigError, match=r"unknown key config\.train\.lrr \(did you mean .lr.\?\); valid keys: .*lr"):
        parse(config)
    with pytest.raises(ConfigError, match=r"config\.train\.batch_size=12 is not divisible"):
        parse(tiny(train__batch_size=12), num_devices=8)


@pytest.mark.parametrize(
    ("flag", "key", "devices"),
    [
        ("--config.train.lrr=0.1", "config.train.lrr", 1),
        ("--config.train.schedule=exp", "config.train.schedule", 1),
        ("--config.train.warmup_steps=-5", "config.train.warmup_steps", 1),
        ("--config.train.batch_size=12", "config.train.batch_size", 8),
    ],
)
def test_cli_fails_before_writing_anything(tmp_path, flag, key, devices):
    workdir = tmp_path / "run"
    env = os.environ | {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.train",
            "--config=experiments/configs/train.py:quick",
            f"--workdir={workdir}",
            flag,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode != 0
    assert key in out.stderr and "Traceback" not in out.stderr
    assert not workdir.exists()
