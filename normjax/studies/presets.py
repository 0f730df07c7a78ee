"""Choosing a preset (:quick, :standard, :paper) in a study's `get_config(arg)`."""


def preset(arg: str, presets: dict):
    """presets[arg]() with a clear error naming the valid presets."""
    if arg not in presets:
        raise ValueError(f"unknown preset {arg!r}: valid presets are {', '.join(presets)}")
    return presets[arg]()
