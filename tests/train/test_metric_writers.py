"""Metric writers: TensorBoard events read back by tensorboard's own reader, W&B through a fake module."""

import importlib.machinery
import json
import math
import sys
import types

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import metadata as hp

from normjax.train import metric_writers, records
from normjax.train.config_io import ConfigError, parse
from normjax.train.loop import run_job


def _events(logdir: str) -> EventAccumulator:
    acc = EventAccumulator(logdir, size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def _series(acc: EventAccumulator, tag: str) -> list[tuple[int, float]]:
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def test_tensorboard_events_hold_every_scalar_and_one_per_layer(tmp_path):
    grads = np.array([0.5, 0.25, 0.125])
    with metric_writers.create_default_writer(str(tmp_path), tensorboard=True) as writer:
        writer.write_hparams({"model": {"placement": "pre", "num_layers": 3}, "train": {"lr": 1e-3, "buckets": ()}})
        writer.write_scalars(0, {"valid/nll": 5.5, "diag/grad_norm/decoder": grads})
        writer.write_scalars(10, {"train/loss": np.float32(4.0), "valid/nll": math.nan})
    acc = _events(str(tmp_path / "tb"))
    assert _series(acc, "valid/nll")[0] == (0, 5.5) and math.isnan(_series(acc, "valid/nll")[1][1])
    assert _series(acc, "train/loss") == [(10, 4.0)]
    for i, g in enumerate(grads):
        assert _series(acc, f"diag/grad_norm/decoder/layer_{i}") == [(0, g)]
    content = acc.PluginTagToContent(hp.PLUGIN_NAME)
    start = hp.parse_session_start_info_plugin_data(content[hp.SESSION_START_INFO_TAG])
    assert start.hparams["model/placement"].string_value == "pre"
    assert start.hparams["train/lr"].number_value == 1e-3 and start.hparams["model/num_layers"].number_value == 3
    assert hp.SESSION_END_INFO_TAG in content
    metrics = hp.parse_experiment_plugin_data(content[hp.EXPERIMENT_TAG]).metric_infos
    assert [m.name.tag for m in metrics] == list(metric_writers.HPARAM_METRICS)
    log = records.read_jsonl(str(tmp_path / "metrics.jsonl"))  # the JSONL keeps one list per layer
    assert log[0] == {"step": 0, "valid/nll": 5.5, "diag/grad_norm/decoder": grads.tolist()}
    assert log[1] == {"step": 10, "train/loss": 4.0, "valid/nll": None}


def test_rewind_hides_the_steps_after_the_checkpoint_everywhere(tmp_path):
    writer = metric_writers.create_default_writer(str(tmp_path), tensorboard=True)
    writer.rewind(-1)
    for step in (0, 10, 20):
        writer.write_scalars(step, {"train/loss": float(step)})
    writer.close()
    writer = metric_writers.create_default_writer(str(tmp_path), tensorboard=True)  # a resume from step 10
    writer.rewind(10)
    writer.write_scalars(20, {"train/loss": -1.0})
    writer.close()
    assert _series(_events(str(tmp_path / "tb")), "train/loss") == [(0, 0.0), (10, 10.0), (20, -1.0)]
    assert [r["train/loss"] for r in records.read_jsonl(str(tmp_path / "metrics.jsonl"))] == [0.0, 10.0, -1.0]


def test_layer_tags_sort_in_layer_order_and_matrices_are_refused():
    tags = list(metric_writers.per_layer_scalars({"g": np.arange(12.0)}))
    assert tags == sorted(tags) and tags[0] == "g/layer_00" and tags[-1] == "g/layer_11"
    with pytest.raises(ValueError, match="one value per layer"):
        metric_writers.per_layer_scalars({"g": np.ones((2, 2))})


class _FakeRun:
    def __init__(self, **kwargs):
        self.init, self.logged, self.config, self.finished = kwargs, [], {}, False
        self.config = types.SimpleNamespace(values={}, update=lambda d, allow_val_change: self.config.values.update(d))

    def log(self, data, step):
        self.logged.append((step, data))

    def finish(self):
        self.finished = True


@pytest.fixture
def fake_wandb(monkeypatch):
    module = types.ModuleType("wandb")
    module.__spec__ = importlib.machinery.ModuleSpec("wandb", None)
    module.runs = []
    module.init = lambda **kwargs: module.runs.append(_FakeRun(**kwargs)) or module.runs[-1]
    monkeypatch.setitem(sys.modules, "wandb", module)
    return module


def test_wandb_backend_logs_per_layer_scalars_and_the_config(tmp_path, fake_wandb):
    with metric_writers.create_default_writer(str(tmp_path), wandb_project="normjax") as writer:
        assert not fake_wandb.runs  # nothing opened before the first write
        writer.write_hparams({"train": {"lr": 0.5}})
        writer.write_scalars(5, {"train/loss": 2.0, "diag/ffn_grad_norm/encoder": [1.0, 2.0]})
    (run,) = fake_wandb.runs
    assert run.init["project"] == "normjax" and run.init["resume"] == "allow" and run.finished
    assert run.config.values == {"train/lr": 0.5}
    assert run.logged == [
        (5, {"train/loss": 2.0, "diag/ffn_grad_norm/encoder/layer_0": 1.0, "diag/ffn_grad_norm/encoder/layer_1": 2.0})
    ]
    same = metric_writers.WandbWriter("normjax", str(tmp_path))
    assert same.id == run.init["id"]  # a resumed job continues the same W&B run


def test_a_requested_backend_that_is_not_installed_is_a_config_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(ConfigError, match="needs the `wandb` package"):
        metric_writers.create_default_writer(str(tmp_path), wandb_project="p")
    assert not list(tmp_path.iterdir())


def test_a_training_run_writes_tensorboard_events_without_torch(tmp_path, tiny):
    run_job(parse(tiny(train__tensorboard=True, train__diag_every=20)), str(tmp_path), progress=False)
    acc = _events(str(tmp_path / "tb"))
    log = records.read_jsonl(str(tmp_path / "metrics.jsonl"))
    assert _series(acc, "train/loss") == [(r["step"], pytest.approx(r["train/loss"])) for r in log[1:]]
    grads = [(r["step"], r["diag/grad_norm/decoder"][0]) for r in log if "diag/grad_norm/decoder" in r]
    assert _series(acc, "diag/grad_norm/decoder/layer_0") == [(s, pytest.approx(g)) for s, g in grads]
    assert json.loads((tmp_path / "config.json").read_text())["train"]["tensorboard"] is True
    assert "torch" not in sys.modules
