"""depth_scaling presets: quick (CPU, about a minute), standard (the committed report), paper (accelerators).

python -m normjax.studies.depth_scaling --config=:quick
"""

import ml_collections

from normjax.studies import schema as s
from normjax.studies.presets import preset


def _base():
    c = ml_collections.ConfigDict()
    c.placements = ("post", "pre")
    c.settings = ("theory", "real")
    c.depths = (6, 12, 24)
    c.vocab_size = 256
    c.d_model, c.num_heads, c.d_ff = 64, 4, 256
    c.batch_size, c.seq_len = 8, 16
    c.num_batches = 4  # per seed
    c.seed = 0  # seeds seed .. seed + num_seeds - 1; slopes are fitted per seed, judged on their mean's interval
    c.num_seeds = 6  # a seed costs one forward/backward per batch (compiles are per depth): 6 seeds keep the
    # 95% interval of a slope (seed s.d. up to 0.08) inside a band of +- 0.1 when the mean sits on the prediction
    return c


def _standard():
    c = _base()
    c.depths = (6, 12, 24, 48, 96)
    c.num_seeds = 8
    return c


def _paper():
    c = _base()
    c.depths = (6, 12, 24, 48, 96, 192)
    c.d_model, c.num_heads, c.d_ff = 512, 8, 2048
    c.vocab_size, c.batch_size, c.seq_len, c.num_batches, c.num_seeds = 10000, 16, 64, 16, 5
    return c


def get_config(arg: str = "quick"):
    return preset(arg, {"quick": _base, "standard": _standard, "paper": _paper})


SCHEMA = s.MODEL | dict(
    placements=s.PLACEMENTS,
    settings=s.choices(*s.SETTINGS),
    depths=s.DEPTHS,
    batch_size=s.POS,
    seq_len=s.POS,
    num_batches=s.POS,
    seed=s.SEED,
    num_seeds=s.POS,
)


def check(values: dict) -> None:
    """The sizes build; at least two depths to fit the slopes."""
    s.check_sizes(values)
    s.check_fit_depths("depth_scaling", values)
