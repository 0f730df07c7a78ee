"""ln_jacobian presets: quick (CPU, about a minute), standard (CPU, the committed report), paper.

python -m normjax.studies.ln_jacobian --config=:quick
"""

import ml_collections

from normjax.studies import schema as s
from normjax.studies.presets import preset
from normjax.train.config_schema import Spec


def _quick():
    c = ml_collections.ConfigDict()  # hidden_norms' model sizes, so the two studies line up
    c.placements = ("post", "pre", "sandwich", "deepnorm")
    c.settings = ("theory", "real")
    c.vocab_size = 1000
    c.d_model, c.num_heads, c.d_ff = 128, 4, 512
    c.num_layers = 24
    c.batch_size, c.seq_len = 8, 32
    c.seed, c.num_seeds = 0, 3  # seeds seed .. seed + num_seeds - 1: verdicts from their mean and 95% interval
    c.num_check_tokens = 4  # per norm site, for the autodiff checks (first seed)
    c.gamma_noise = 0.3  # gamma = 1 + 0.3 N(0, 1) for the non-constant-gamma check
    return c


def _standard():
    c = _quick()
    c.placements = ("post", "pre", "sandwich", "deepnorm", "admin")
    c.num_layers, c.num_seeds = 48, 5
    return c


def _paper():
    c = _quick()
    c.placements = ("post", "pre", "sandwich", "deepnorm", "admin")
    c.d_model, c.num_heads, c.d_ff, c.num_layers = 512, 8, 2048, 48
    c.batch_size, c.seq_len, c.num_seeds = 16, 64, 5
    return c


def get_config(arg: str = "quick"):
    return preset(arg, {"quick": _quick, "standard": _standard, "paper": _paper})


SCHEMA = s.MODEL | dict(  # its own keys: hidden_norms' sizes, not its schema
    placements=s.PLACEMENTS,
    settings=s.choices(*s.SETTINGS),
    num_layers=s.POS,
    batch_size=s.POS,
    seq_len=s.POS,
    seed=s.SEED,
    num_seeds=s.POS,
    num_check_tokens=s.POS,
    gamma_noise=Spec(float, lo=0.0),
)
