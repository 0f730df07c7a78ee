"""cost presets: quick (CPU, about a minute), standard (CPU, the committed report), paper.

python -m normjax.studies.cost --config=:quick --workdir=results
"""

import ml_collections

import normjax
from normjax.studies import schema as s
from normjax.studies.presets import preset
from normjax.train.config_io import ConfigError
from normjax.train.config_schema import Spec

ALL = ("post", "pre", "sandwich", "deepnorm", "admin", "rezero", "layerscale", "tfixup", "mixln", "hybrid")


def _quick():
    c = ml_collections.ConfigDict()
    c.placements = ("post", "pre", "sandwich")  # S6 needs post and pre; one other beside
    c.reference = "pre"  # ratios are relative to this placement
    c.vocab_size = 256
    c.d_model, c.num_heads, c.d_ff, c.num_layers = 128, 4, 512, 6
    c.batch_size, c.seq_len = 16, 64
    c.warmup_steps = 2  # untimed steps per placement after compiling
    c.repeats, c.inner_steps = 3, 3  # timing rounds per seed (placements in a new random order each), steps per timing
    c.seed, c.num_seeds = 0, 3  # independent timing blocks: S6 is judged on the interval over their ratios
    return c


def _standard():
    c = _quick()
    c.placements = ALL
    c.repeats, c.num_seeds = 3, 5
    return c


def _paper():
    c = _quick()
    c.placements = ALL
    c.vocab_size = 10_000
    c.d_model, c.num_heads, c.d_ff, c.num_layers = 512, 8, 2048, 12
    c.batch_size, c.seq_len = 32, 256
    c.repeats, c.inner_steps, c.num_seeds = 5, 10, 5
    return c


def get_config(arg: str = "quick"):
    return preset(arg, {"quick": _quick, "standard": _standard, "paper": _paper})


SCHEMA = s.MODEL | dict(
    placements=s.PLACEMENTS,
    reference=Spec(str, choices=normjax.PLACEMENTS),
    num_layers=s.POS,
    batch_size=s.POS,
    seq_len=s.POS,
    warmup_steps=s.SEED,
    repeats=s.POS,
    inner_steps=s.POS,
    seed=s.SEED,
    num_seeds=s.POS,
)


def check(values: dict) -> None:
    """The sizes build; the reference placement is one of those timed."""
    s.check_sizes(values)
    if values["reference"] not in values["placements"]:
        raise ConfigError(f"config.reference={values['reference']!r} must be one of config.placements")
