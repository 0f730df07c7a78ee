"""ml_collections presets: one file per experiment, get_config(arg) with :quick and :paper."""

import os

CONFIG_DIR = os.path.dirname(os.path.abspath(__file__))


def path(name: str) -> str:
    """The packaged config file of experiment `name` (an absolute path: any working directory reads it)."""
    return os.path.join(CONFIG_DIR, f"{name}.py")


def preset(arg: str, presets: dict):
    """presets[arg]() with a clear error naming the valid presets."""
    if arg not in presets:
        raise ValueError(f"unknown preset {arg!r}: valid presets are {', '.join(presets)}")
    return presets[arg]()
