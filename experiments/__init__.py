"""Experiments: thin absl mains, one per figure or claim; presets in configs/."""
