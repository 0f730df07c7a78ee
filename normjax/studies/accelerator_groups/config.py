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
    from normjax.studies.accelerator_groups.groups import SWEEP_GROUPS, group_config, study_config

    seeds = {
        r.run.train.seed for name in SWEEP_GROUPS if name in values["groups"] for r in train.expand(group_config(name))
    }
    for name in set(values["groups"]) - set(SWEEP_GROUPS):  # a study group: the seeds its study's config runs
        config = study_config(name)
        seeds |= set(range(config.seed, config.seed + max(config.num_seeds, config.get("d2_num_seeds", 0))))
    return seeds
