"""grad_norms_at_init presets: quick (CPU, about a minute), standard (CPU, the committed report), paper.

python -m normjax.studies.grad_norms_at_init --config=:quick
"""

import ml_collections

from normjax.studies import schema as s
from normjax.studies.presets import INIT_TIME_SPECS, preset
from normjax.train.config_schema import Spec

PAPER_SPECS = INIT_TIME_SPECS + ("mixln",)  # the :paper list of the 6-6 and encoder models (mixln reported there:
# 1 Post-LN layer of 6; R5 is judged on the deep decoder, `deep_*`)


def _quick():
    c = ml_collections.ConfigDict()
    c.archs = ("encoder_decoder", "encoder")  # Xiong et al.'s 6-6 model (Fig. 3), an encoder
    c.placements = ("post", "pre")
    c.vocab_size = 1000
    c.d_model, c.num_heads, c.d_ff = 128, 4, 512
    c.num_layers = 6
    c.batch_size, c.seq_len = 8, 32
    c.num_batches = 24  # ||E[grad]|| over this many batches per seed (the paper: 100)
    c.seed, c.num_seeds = 0, 3  # seeds seed .. seed + num_seeds - 1: verdicts from their mean and 95% interval
    # R5 in Mix-LN's setting: a decoder-only LM at init (Li et al.'s LLaMA-71M has 12 layers and POST_NUM=3; the
    # other presets use 24, deep enough for 6 Post-LN layers, floor(24 / 4)). Mix-LN against Pre-LN, then Post-LN.
    c.deep_layers = 12
    c.deep_placements = ("pre", "mixln", "post")
    c.deep_num_batches = 8
    # X6 on real batches (Xiong et al.'s Fig. 3 uses IWSLT14 De-En; :standard and :paper): the 6-6 model on the
    # De-En pairs of the system's gettext catalogs (normjax.train.data_gettext, warmup_ablation's translation
    # corpus), `num_batches` training batches of `batch_size` pairs up to `seq_len` tokens; () leaves the arm out
    # (:quick, so the main command needs no catalogs)
    c.gettext_placements = ()
    c.gettext_bpe_vocab = 2000  # the joint BPE vocabulary of warmup_ablation's translation arm (X7)
    # seeds seed .. seed + gettext_num_seeds - 1 of the real-batch arm (X6 and L3 are judged on it; a seed of the
    # 6-6 model at 48 batches took 4.6 s per placement on the 2-core CPU, 2026-12-07)
    c.gettext_num_seeds = 3
    return c


def _standard():
    c = _quick()
    c.num_batches, c.num_seeds = 48, 5
    c.placements += ("lns", "mhc")  # LayerNorm Scaling's and mHC's gradient profiles beside Pre-LN's (issue 22)
    # Cost, measured side by side on the 2-core CPU under load: one seed of the 24-layer decoder at 24 batches
    # (32-44 s) ~ one seed of the 6-6 model at 48 batches (35-39 s); the 6-6 + encoder arms without mixln and this
    # arm come to ~1.3x the 75.7 s of the previous :standard (3 placements, no deep arm): ~100 s.
    c.deep_layers, c.deep_num_batches = 24, 24
    c.gettext_placements = ("post", "pre")  # X6's and L3's real batches (pilot: scripts/pilot_x6_gettext.py)
    # L3's encoder slope spreads by about 0.05/layer per seed (5 seeds at stop 44: +0.014 [-0.046, +0.075]); 30
    # seeds give a 95% half-width near 0.02 (issue 37 asks for about 30): 4.6 min for both placements (measured)
    c.gettext_num_seeds = 30
    return c


def _paper():
    c = _quick()
    c.placements = PAPER_SPECS
    c.vocab_size, c.d_model, c.num_heads, c.d_ff = 10000, 512, 4, 1024  # IWSLT model (X8)
    c.batch_size, c.seq_len, c.num_batches, c.num_seeds = 32, 64, 100, 5
    c.deep_layers, c.deep_num_batches = 24, 100
    c.gettext_placements = ("post", "pre")
    c.gettext_num_seeds = 30
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
    deep_layers=s.POS,
    deep_placements=s.MODEL_SPECS,
    deep_num_batches=s.POS,
    gettext_placements=Spec(tuple, item=Spec(str), nonempty=False),
    gettext_bpe_vocab=Spec(int, lo=8),
    gettext_num_seeds=s.POS,
)


def check(values: dict) -> None:
    """Every placement spec builds in at least one of the study's architectures; the sizes build."""
    s.check_specs("grad_norms_at_init", values, ("placements",), [{"arch": a} for a in values["archs"]])
    s.check_specs("grad_norms_at_init", values, ("deep_placements",), [{"arch": "decoder"}])
    s.check_specs("grad_norms_at_init", values, ("gettext_placements",), [{"arch": "encoder_decoder"}])
    s.check_sizes(values)
