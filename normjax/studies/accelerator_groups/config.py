"""accelerator_groups presets: every preset reads every group (the groups are defined in groups.py).

python -m normjax.studies.accelerator_groups --config=:standard --workdir=results
"""

import ml_collections

from normjax.studies.accelerator_groups.groups import GROUPS
from normjax.studies.presets import preset
from normjax.train.config_io import ConfigError
from normjax.train.config_schema import Spec

SCHEMA = dict(groups=Spec(tuple, item=Spec(str, choices=tuple(GROUPS)), nonempty=False))


def _all():
    c = ml_collections.ConfigDict()
    c.groups = tuple(GROUPS)  # the group folders read under WORKDIR/accelerator_groups/ (absent ones wait)
    return c


def get_config(arg: str = "quick"):
    return preset(arg, {"quick": _all, "standard": _all, "paper": _all})


def check(values: dict) -> None:
    """Each group named once."""
    if len(set(values["groups"])) != len(values["groups"]):
        raise ConfigError(f"config.groups={tuple(values['groups'])!r} names a group twice")


def _seeds_in(values: dict) -> set[int]:
    """Every seed a study config names: `seed` .. `seed` + its seed count - 1 at any level, and swept `*.seed`."""
    found = set()
    if isinstance(values.get("seed"), int):
        count = max(values.get("num_seeds", 1), values.get("d2_num_seeds", 1))
        found |= set(range(values["seed"], values["seed"] + count))
    for key, value in values.items():
        if isinstance(value, dict):
            found |= _seeds_in(value)
        elif key.endswith(".seed") and isinstance(value, list | tuple):
            found |= {int(v) for v in value}
    return found


def judged_seeds(values: dict) -> set[int]:
    """The seeds the rules judge: every seed of the sweep groups' sub-grids (the base config's seed where none
    varies) and every seed a study group's config names."""
    from normjax import train
    from normjax.studies.accelerator_groups.groups import SWEEP_GROUPS, group_config, study_config

    names = values["groups"]
    seeds = {r.run.train.seed for name in SWEEP_GROUPS if name in names for r in train.expand(group_config(name))}
    for name in set(names) - set(SWEEP_GROUPS):
        seeds |= _seeds_in(study_config(name).to_dict())
    return seeds
