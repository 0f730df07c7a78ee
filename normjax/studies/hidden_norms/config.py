"""hidden_norms presets: quick (CPU, under a minute), standard (the committed report), paper (accelerators).

python -m normjax.studies.hidden_norms --config=:quick --workdir=results
"""

import ml_collections

from normjax import specs
from normjax.studies import schema as s
from normjax.studies.presets import INIT_TIME_SPECS, preset
from normjax.train.config_io import ConfigError
from normjax.train.config_schema import Spec

PAPER_SPECS = INIT_TIME_SPECS  # the :paper list


def _base():
    c = ml_collections.ConfigDict()
    c.placements = ("post", "pre", "sandwich", "deepnorm", "admin", "rezero")
    c.settings = ("theory", "real")
    c.vocab_size = 1000
    c.d_model, c.num_heads, c.d_ff = 128, 4, 512
    c.num_layers = 24
    c.final_norm_depths = (1, 3, 6, 12, 24)  # S4's final-norm half: real-setting Pre-LN with and without it
    c.batch_size, c.seq_len = 8, 32
    c.seed = 0  # seeds seed .. seed + num_seeds - 1; every verdict needs at least 3
    c.num_seeds = 3
    return c


def _standard():
    c = _base()
    c.placements += ("lns", "mhc")  # LayerNorm Scaling's and mHC's streams beside Pre-LN's (issue 22)
    c.placements += ("mhc_lite", "siamese", "pre_gpas")  # the 2025-26 schemes (issue 40): reported, not judged
    c.batch_size, c.num_seeds = 16, 5
    return c


def _paper():
    c = _base()
    c.d_model, c.num_heads, c.d_ff, c.num_layers = 512, 8, 2048, 48
    c.batch_size, c.seq_len, c.num_seeds = 16, 64, 5
    c.placements = PAPER_SPECS
    c.final_norm_depths = (1, 3, 6, 12, 24, 48)
    return c


def get_config(arg: str = "quick"):
    return preset(arg, {"quick": _base, "standard": _standard, "paper": _paper})


SCHEMA = s.MODEL | dict(
    placements=s.MODEL_SPECS,
    settings=s.choices(*s.SETTINGS),
    num_layers=s.POS,
    final_norm_depths=Spec(tuple, item=s.POS, nonempty=False),  # () leaves out S4's final-norm arms
    batch_size=s.POS,
    seq_len=s.POS,
    seed=s.SEED,
    num_seeds=s.POS,
)
THEORY = {"arch": "encoder", "num_heads": 1, "theory": True}  # Xiong et al.'s setting (real: the config's own)


def check(values: dict) -> None:
    """Every spec builds in one of the settings; the sizes build; the theory setting alone measures something."""
    fields = [THEORY if setting == "theory" else {"arch": "encoder"} for setting in values["settings"]]
    s.check_specs("hidden_norms", values, ("placements",), fields)
    s.check_sizes(values)
    if tuple(values["settings"]) == ("theory",):  # the theory setting skips these
        theory = [
            s.model(values | {"num_heads": 1}, arch="encoder", theory=True, **specs.parse(p).fields)
            for p in values["placements"]
        ]
        if all(cfg.has_embedding_norm("encoder") for cfg in theory):
            raise ConfigError(
                f"config.placements={tuple(values['placements'])!r} all normalise the embeddings, which the theory "
                "setting (config.settings) bypasses: nothing would be measured; add 'real' or another placement"
            )
