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


def judged_seeds(values: dict) -> set[int]:
    """The seeds the rules judge: every seed of the groups' sub-grids (the base config's seed where none varies)."""
    from normjax import train
    from normjax.studies.accelerator_groups.groups import group_config

    return {r.run.train.seed for name in values["groups"] for r in train.expand(group_config(name))}
