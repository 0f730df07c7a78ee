"""One list of traced hyperparameters: steps.HPARAMS, config_schema.TRACED and every caller's values derive from it."""

import dataclasses
import math

import pytest

from normjax.studies.cost import config as cost_config
from normjax.studies.cost import measure as cost
from normjax.studies.deep_training import config as deep_config
from normjax.studies.deep_training import runs as deep_runs
from normjax.train import job, steps
from normjax.train.config_io import model_config, parse
from normjax.train.config_schema import HPARAM_FIELDS, TRACED, TrainConfig, shape_key

FIELDS = {f.name for f in dataclasses.fields(TrainConfig)}


def test_every_traced_key_is_a_train_config_field():
    assert tuple(HPARAM_FIELDS) == steps.HPARAMS
    assert set(HPARAM_FIELDS.values()) <= FIELDS and set(TRACED) <= FIELDS
    # TRACED: the hyperparameters' fields but the loop's length, and the seed last (shape_key may drop it)
    assert set(TRACED) == set(HPARAM_FIELDS.values()) - {"num_steps"} | {"seed"} and TRACED[-1] == "seed"


def test_each_hparam_reads_its_field(tiny):
    run = parse(tiny(train__noam_d_model=0, train__divergence_loss=0.0))
    cfg = model_config(run, 50)
    base = job.hparams(run, cfg)
    assert set(base) == set(steps.HPARAMS) and base == job.train_hparams(run.train, cfg.d_model, cfg.vocab_size)
    assert base["d_model"] == cfg.d_model and base["divergence_loss"] == pytest.approx(1.5 * math.log(50))
    for name, field in HPARAM_FIELDS.items():
        value = getattr(run.train, field)
        other = dataclasses.replace(run.train, **{field: value + 1 if isinstance(value, int) else value * 2 or 0.5})
        changed = job.train_hparams(other, cfg.d_model, cfg.vocab_size)
        assert {k for k in base if changed[k] != base[k]} == {name}, field
        if field != "num_steps":  # the others are traced: runs differing only in them share one compiled step
            assert shape_key(dataclasses.replace(run, train=other)) == shape_key(run), field


def test_job_and_the_studies_use_the_same_function(monkeypatch, tiny):
    calls = []
    real = job.train_hparams
    monkeypatch.setattr(job, "train_hparams", lambda *a: calls.append(a) or real(*a))
    run = parse(tiny())
    deep, costs = deep_config.get_config("quick"), cost_config.get_config("quick")
    for hp in (
        job.hparams(run, model_config(run, 50)),
        deep_runs.hparams(deep, 257, deep.lr, 3, deep.num_steps),
        cost.hparams(costs),
    ):
        assert set(hp) == set(steps.HPARAMS)
    assert len(calls) == 3
    # the values each study means: deep_training's lr from step `warmup`, no smoothing; cost's small constant lr
    assert calls[1][0].lr == calls[1][0].end_lr == deep.lr and calls[1][0].warmup_steps == 3
    assert calls[1][0].label_smoothing == 0.0 and calls[2][0].lr == 1e-4
