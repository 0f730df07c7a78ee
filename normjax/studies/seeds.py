"""The seeds a study runs, from its config (measurement code reads them here, never from the report layer)."""


def seeds(config) -> list[int]:
    """The seeds a study runs: seed, seed + 1, ..., seed + num_seeds - 1."""
    return list(range(int(config.seed), int(config.seed) + int(config.num_seeds)))
