"""Thresholds cannot be tuned to the result: no study preset judges a seed from the pilot range."""

import importlib

import pytest

from normjax.report.rules import PILOT_SEED
from normjax.studies import STUDIES
from normjax.threshold import SOURCES

PRESETS = ("quick", "standard", "paper")


def judged_seeds(config: dict, num_seeds: int) -> set[int]:
    """Every seed a config runs: `seed` .. `seed` + `num_seeds` - 1 at any level (`num_seeds` beside it, else
    the study's own count) and every value of a swept `*.seed` axis."""
    found = set()
    if isinstance(config.get("seed"), int):
        found |= set(range(config["seed"], config["seed"] + int(config.get("num_seeds", num_seeds))))
    for key, value in config.items():
        if isinstance(value, dict):
            found |= judged_seeds(value, num_seeds)
        elif key.endswith(".seed") and isinstance(value, list | tuple):
            found |= {int(v) for v in value}
    return found


def _config(study, preset) -> dict:
    config = study.config.get_config(preset)
    return config.to_dict() if hasattr(config, "to_dict") else dict(config)


@pytest.mark.parametrize("study", [s for s in STUDIES if s.verdicts is not None], ids=lambda s: s.name)
@pytest.mark.parametrize("preset", PRESETS)
def test_no_judged_seed_is_a_pilot_seed(study, preset):
    module = importlib.import_module(study.config.__name__)
    if hasattr(module, "judged_seeds"):  # a study judging runs defined elsewhere (accelerator_groups' groups)
        seeds = module.judged_seeds(_config(study, preset))
    else:
        seeds = judged_seeds(_config(study, preset), getattr(module, "NUM_SEEDS", 1))
    assert seeds, f"{study.name}:{preset} names no seed"
    pilots = sorted(s for s in seeds if s >= PILOT_SEED)
    assert not pilots, f"{study.name}:{preset} judges pilot seeds {pilots} (pilots are >= {PILOT_SEED})"


def test_the_seed_walk_finds_nested_and_swept_seeds():
    config = {"seed": 0, "num_seeds": 3, "train": {"seed": 998}, "grid": {"train.seed": [1000, 1001]}}
    assert judged_seeds(config, 2) == {0, 1, 2, 998, 999, 1000, 1001}


@pytest.mark.parametrize("study", [s for s in STUDIES if s.thresholds], ids=lambda s: s.name)
def test_every_threshold_names_its_source_and_a_pilot_one_its_pilot_seeds(study):
    for name, threshold in study.thresholds.items():
        assert threshold.source in SOURCES, f"{study.name}.{name}: source {threshold.source!r} not in {list(SOURCES)}"
        if threshold.source == "pilot":
            assert "pilot seeds" in threshold.why, f"{study.name}.{name}: a pilot threshold gives the pilot's numbers"
