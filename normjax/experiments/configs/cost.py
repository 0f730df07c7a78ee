"""cost presets.

python -m experiments.cost --config=experiments/configs/cost.py:quick --workdir=results
"""

import ml_collections

from normjax.experiments.configs import preset


def _base():
    c = ml_collections.ConfigDict()
    c.placements = ("post", "pre", "sandwich", "deepnorm", "admin", "rezero", "layerscale", "tfixup", "mixln", "hybrid")
    c.reference = "pre"  # ratios are relative to this placement
    c.vocab_size = 256
    c.d_model, c.num_heads, c.d_ff, c.num_layers = 128, 4, 512, 6
    c.batch_size, c.seq_len = 16, 64
    c.warmup_steps = 2  # untimed steps per placement after compiling
    c.repeats, c.inner_steps = 9, 3  # timing rounds (placements in a new random order each), steps per timing
    c.seed = 0
    return c


def _paper():
    c = _base()
    c.vocab_size = 10_000
    c.d_model, c.num_heads, c.d_ff, c.num_layers = 512, 8, 2048, 12
    c.batch_size, c.seq_len = 32, 256
    c.repeats, c.inner_steps = 15, 10
    return c


def get_config(arg: str = "quick"):
    return preset(arg, {"quick": _base, "paper": _paper})
