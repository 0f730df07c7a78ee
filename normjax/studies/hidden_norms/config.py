"""hidden_norms presets: quick (CPU, under a minute), standard (the committed report), paper (accelerators).

python -m experiments.hidden_norms --config=experiments/configs/hidden_norms.py:quick --workdir=results
"""

import ml_collections

from normjax.experiments.configs import preset
from normjax.specs import study_specs


def _base():
    c = ml_collections.ConfigDict()
    c.placements = ("post", "pre", "sandwich", "deepnorm", "admin", "rezero")
    c.settings = ("theory", "real")
    c.vocab_size = 1000
    c.d_model, c.num_heads, c.d_ff = 128, 4, 512
    c.num_layers = 24
    c.batch_size, c.seq_len = 8, 32
    c.seed = 0  # seeds seed .. seed + num_seeds - 1; every verdict needs at least 3
    c.num_seeds = 3
    return c


def _standard():
    c = _base()
    c.batch_size, c.num_seeds = 16, 5
    return c


def _paper():
    c = _base()
    c.d_model, c.num_heads, c.d_ff, c.num_layers = 512, 8, 2048, 48
    c.batch_size, c.seq_len, c.num_seeds = 16, 64, 5
    c.placements = study_specs("hidden_norms")  # registry placements and option variants
    return c


def get_config(arg: str = "quick"):
    return preset(arg, {"quick": _base, "standard": _standard, "paper": _paper})
