"""The seeds a study runs, from its config (measurement code reads them here, never from the report layer)."""


def seeds(config, num_seeds: int | None = None) -> list[int]:
    """The seeds a study runs: seed, seed + 1, ..., seed + n - 1 (n: num_seeds unless given, for an arm with its
    own count)."""
    n = config.num_seeds if num_seeds is None else num_seeds
    return list(range(int(config.seed), int(config.seed) + int(n)))
