"""grad_norms_at_init presets: quick (CPU, about a minute), standard (CPU, the committed report), paper.

python -m normjax.studies.grad_norms_at_init --config=:quick
"""

import ml_collections

from normjax.studies import schema as s
from normjax.studies.presets import INIT_TIME_SPECS, preset

PAPER_SPECS = INIT_TIME_SPECS + ("mixln",)  # the :paper list; mixln's Post-LN and Pre-LN layers at init


def _quick():
    c = ml_collections.ConfigDict()
    c.archs = ("encoder_decoder", "encoder")  # Xiong et al.'s 6-6 model (Fig. 3), an encoder
    c.placements = ("post", "pre", "mixln")
    c.vocab_size = 1000
    c.d_model, c.num_heads, c.d_ff = 128, 4, 512
    c.num_layers = 6
    c.batch_size, c.seq_len = 8, 32
    c.num_batches = 24  # ||E[grad]|| over this many batches per seed (the paper: 100)
    c.seed, c.num_seeds = 0, 3  # seeds seed .. seed + num_seeds - 1: verdicts from their mean and 95% interval
    return c


def _standard():
    c = _quick()
    c.num_batches, c.num_seeds = 48, 5
    return c


def _paper():
    c = _quick()
    c.placements = PAPER_SPECS
    c.vocab_size, c.d_model, c.num_heads, c.d_ff = 10000, 512, 4, 1024  # IWSLT model (X8)
    c.batch_size, c.seq_len, c.num_batches, c.num_seeds = 32, 64, 100, 5
    return c


def get_config(arg: str = "quick"):
    return preset(arg, {"quick": _quick, "standard": _standard, "paper": _paper})


SCHEMA = s.MODEL | dict(
    archs=s.choices("encoder_decoder", "encoder", "decoder"),
    placements=s.MODEL_SPECS,
    num_layers=s.POS,
    batch_size=s.POS,
    seq_len=s.POS,
    num_batches=s.POS,
    seed=s.SEED,
    num_seeds=s.POS,
)


def check(values: dict) -> None:
    """Every placement spec builds in at least one of the study's architectures; the sizes build."""
    s.check_specs("grad_norms_at_init", values, ("placements",), [{"arch": a} for a in values["archs"]])
    s.check_sizes(values)
