"""Sweeps: grid expansion, one compiled step per shape, sharding by index, skip-on-rerun."""

import pytest

from normjax.train import records
from normjax.train.config_io import ConfigError
from normjax.train.job import compiled
from normjax.train.sweep import expand, format_table, parse_shard, run_sweep


def _grid(tiny, axes, **overrides):
    config = tiny(**overrides)
    config["sweep"] = {"axes": axes}
    return config


def test_expand_is_the_cartesian_product_and_validates_every_run(tiny):
    runs = expand(_grid(tiny, {"model.placement": ["post", "pre"], "train.lr": [1e-3, 2e-3, 4e-3]}))
    assert [r.name for r in runs][:2] == ["placement=post,lr=0.001", "placement=post,lr=0.002"]
    assert len({r.name for r in runs}) == 6
    assert [(r.run.model["placement"], r.run.train.lr) for r in runs[-2:]] == [("pre", 2e-3), ("pre", 4e-3)]
    with pytest.raises(ConfigError, match="config.train.lrr"):
        expand(_grid(tiny, {"train.lrr": [1.0]}))
    with pytest.raises(ConfigError, match="config.train.schedule"):
        expand(_grid(tiny, {"train.schedule": ["constant", "bogus"]}))
    with pytest.raises(ConfigError, match="placement"):
        expand(_grid(tiny, {"model.placement": ["pre", "middle"]}))


def test_parse_shard():
    assert parse_shard("1/3") == (1, 3)
    for bad in ("3/3", "x", "1/0"):
        with pytest.raises(ConfigError, match="shard"):
            parse_shard(bad)


def test_runs_sharing_shapes_share_one_compiled_step(tmp_path, tiny):
    # a shape no other test uses (d_ff 24), so the cache count below is this sweep's alone
    axes = {"train.lr": [1e-3, 3e-3], "train.warmup_steps": [0, 5], "train.seed": [0, 1]}
    config = _grid(
        tiny,
        axes,
        model__d_ff=24,
        train__num_steps=10,
        train__eval_every=10,
        train__bleu_examples=0,
        train__checkpoint_every=10,
    )
    runs = expand(config)
    fns = compiled()
    before = fns.train._cache_size(), fns.eval._cache_size()
    result = run_sweep(runs, str(tmp_path), progress=False)
    assert (fns.train._cache_size(), fns.eval._cache_size()) == (before[0] + 1, before[1] + 1)
    assert [r["status"] for r in result["runs"]] == ["done"] * 8
    assert records.read_json(str(tmp_path / "sweep.json")) == result
    finals = {r["summary"]["final"]["train/loss"] for r in result["runs"]}
    assert len(finals) == 8  # every hyperparameter really reached its run
    table = format_table(result).splitlines()
    assert len(table) == 10 and table[-1].startswith("unigram level H = ")  # header, 8 runs, the level
    assert run_sweep(runs, str(tmp_path), progress=False) == result  # rerun: all skipped


def test_shards_split_the_grid(tmp_path, tiny):
    config = _grid(
        tiny,
        {"train.lr": [1e-3, 2e-3, 3e-3]},
        train__num_steps=10,
        train__eval_every=10,
        train__bleu_examples=0,
        train__checkpoint_every=10,
    )
    runs = expand(config)
    result = run_sweep(runs, str(tmp_path), shard=(1, 2), progress=False)
    assert [r["status"] for r in result["runs"]] == ["pending", "done", "pending"]
    result = run_sweep(runs, str(tmp_path), shard=(0, 2), progress=False)
    assert [r["status"] for r in result["runs"]] == ["done"] * 3


def test_vmapped_sweep_trains_a_group_with_one_compiled_step(tmp_path, tiny):
    axes = {"train.lr": [1e-3, 3e-3, 1e-2], "train.seed": [0, 1]}
    config = _grid(
        tiny,
        axes,
        model__d_ff=40,
        train__num_steps=10,
        train__eval_every=10,
        train__bleu_examples=0,
        train__checkpoint_every=10,
    )
    runs = expand(config)
    fns = compiled()
    before = fns.vtrain._cache_size()
    result = run_sweep(runs, str(tmp_path), vmap=True, progress=False)
    assert fns.vtrain._cache_size() == before + 1  # one group of six runs: one vmapped step
    assert [r["status"] for r in result["runs"]] == ["done"] * 6
    assert len({r["summary"]["final"]["train/loss"] for r in result["runs"]}) == 6
    first = records.read_jsonl(str(tmp_path / runs[0].name / "metrics.jsonl"))
    assert [r["step"] for r in first] == [0, 10]


def test_sub_grids_follow_the_main_grid_over_the_same_base(tiny):
    config = _grid(tiny, {"train.warmup_steps": [0, 5]}, train__lr=2e-3)
    config["sweep"]["grids"] = {"sgd": {"train.optimizer": ["sgd"], "train.lr": [0.1, 0.3]}}
    runs = expand(config)
    assert [r.group for r in runs] == ["", "", "sgd", "sgd"]
    assert runs[2].name == "grid=sgd,optimizer=sgd,lr=0.1"
    # the main grid's first values do not leak into a sub-grid: its warmup is the base config's
    assert [r.run.train.warmup_steps for r in runs] == [0, 5, 10, 10] and runs[0].run.train.lr == 2e-3
    config["sweep"]["grids"] = {"bad": {"train.lr": []}}
    with pytest.raises(ConfigError, match=r"config.sweep.grids\['bad'\]"):
        expand(config)
