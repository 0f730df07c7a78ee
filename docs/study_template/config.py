"""toy_study presets: quick (seconds), standard, paper; the schema of every key beside the values.

python -m normjax.studies.toy_study --config=:quick --workdir=results
"""

import ml_collections

from normjax.studies import schema as s
from normjax.studies.presets import preset

SCHEMA = s.MODEL | dict(num_layers=s.POS, batch_size=s.POS, seq_len=s.POS, seed=s.SEED, num_seeds=s.POS)


def _quick():
    c = ml_collections.ConfigDict()
    c.vocab_size, c.d_model, c.num_heads, c.d_ff, c.num_layers = 32, 16, 2, 32, 4
    c.batch_size, c.seq_len, c.seed, c.num_seeds = 2, 8, 0, 3
    return c


def _paper():
    c = _quick()
    c.d_model, c.d_ff, c.num_layers = 512, 2048, 24
    return c


def get_config(arg: str = "quick"):
    return preset(arg, {"quick": _quick, "standard": _quick, "paper": _paper})
