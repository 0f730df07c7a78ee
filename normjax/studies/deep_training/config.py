"""deep_training presets (every preset trains each run at num_seeds >= 3 seeds).

python -m normjax.studies.deep_training --config=:quick --workdir=results
"""

import ml_collections

import normjax
from normjax.studies import schema as s
from normjax.studies.presets import preset
from normjax.train.config_io import ConfigError
from normjax.train.config_schema import Spec
from normjax.train.data_text import byte_vocab

# The :paper runs: the placements trained at depth, then option variants (no_bias only here: beta = 0 at
# init, so at init a model without beta is the same model as with it).
PAPER_SPECS = (
    "post",
    "pre",
    "deepnorm",
    "admin",
    "rezero",
    "tfixup",
    "hybrid",
    "subln",
    "normformer",
    "resi_dual",
    "ngpt",
    "pre:scalenorm",
    "pre+qk_norm",
    "post+no_bias",
    "pre+embedding_norm",
)


def _base():
    """`:quick`, the base of the others: DeepNet Fig. 5's 2 heads at d 32 (95 s of wall time on the 2 cores at
    depths 6 and 18, 2026-12-06; 12 since, for the README's 15-minute :quick)."""
    c = ml_collections.ConfigDict()
    c.runs = ("post", "pre", "deepnorm")  # trained at every depth; specs as in normjax.specs ("pre:dyt")
    c.depths = (6, 12)
    c.side_runs = ("tfixup", "pre:dyt", "sandwich")  # R3, R6 vs pre; sandwich's stream vs pre's (R4)
    c.side_depths = (6,)
    c.d_model, c.num_heads, c.d_ff = 32, 2, 64
    c.seq_len, c.batch_size, c.max_bytes, c.data_seed = 32, 8, 2_000_000, 0
    c.lr, c.num_steps = 3e-3, 50  # constant lr from step 0: no warmup
    c.optimizer, c.b1, c.b2, c.eps = "adam", 0.9, 0.98, 1e-9
    c.early_steps = 10  # the model update is averaged over steps 1..early_steps
    # D2's update is measured by repeating the first early_steps at this small lr: at lr one Adam step already
    # changes F(x) by about ||F(x)|| for every placement, which hides any dependence on depth.
    c.update_lr = 1e-4
    c.probe_every = (
        10  # probes (update, LN inputs, layer gradients, streams) every step to early_steps, then this often
    )
    c.final_window = 20  # final loss = mean train loss of the last steps (each batch seen once)
    c.divergence_factor, c.divergence_patience, c.divergence_check_every = 1.5, 10, 10  # loss > 1.5 ln V
    # S7 (DeepNorm half): the largest of s7_lrs at which Post-LN trains at min(s7_depths) with s7_warmup steps of
    # linear warmup then s7_schedule ("constant" reuses the compiled steps of the runs above), then post and
    # deepnorm at every s7 depth with that lr and warmup.
    c.s7_depths, c.s7_lrs, c.s7_warmup, c.s7_steps, c.s7_schedule = (6, 12), (1e-3,), 30, 150, "constant"
    c.seed, c.num_seeds = 0, 3  # seeds seed .. seed + num_seeds - 1: init, dropout and data order
    # D2 is judged on the median slope's order-statistic interval, finite from 6 seeds: seeds num_seeds ..
    # d2_num_seeds - 1 of post and deepnorm measure D2's early update only (early_steps steps each). :quick adds
    # none (D2 reads inconclusive there; the README's main command stays within its 15 minutes)
    c.d2_num_seeds = 3
    # D2 also at these widths (d_ff 2 x width), every D2 seed an early-update-only run: () none
    c.d2_widths = ()
    return c


def _standard():
    """The committed CPU report, 5 seeds (D2's and D3's per-seed numbers are heavy-tailed; D2 at 15, and at d 128):
    1893 s alone on the 2-core machine (2026-12-07; 1460 s without the d-128 arm, 1275 s before D2's extra seeds)."""
    c = _base()
    c.num_seeds = 5
    c.d2_num_seeds = 15  # issue 37: D2's heavy-tailed per-seed slopes
    c.d2_widths = (128,)  # issue 37: D2 at the other training studies' width too (the main runs stay at d 32)
    c.depths = (6, 12, 24)
    c.side_depths = (6, 24)
    c.seq_len, c.batch_size = 64, 16
    c.num_steps = 100
    c.s7_depths, c.s7_lrs, c.s7_warmup, c.s7_steps = (6, 18, 36), (3e-3, 1e-3), 50, 250
    return c


def _paper():
    c = _base()
    c.runs = PAPER_SPECS
    c.depths = (6, 12, 18, 24, 50, 100)
    c.side_runs, c.side_depths = ("pre:dyt", "sandwich"), (6, 24, 100)
    c.d_model, c.d_ff = 64, 128  # DeepNet Fig. 5's 64-128-2
    c.lr, c.num_steps, c.batch_size, c.seq_len = 5e-4, 2000, 64, 128
    c.early_steps, c.probe_every, c.final_window = 100, 50, 100
    c.s7_depths, c.s7_lrs, c.s7_warmup, c.s7_steps = (6, 18, 36, 50, 100), (3e-3, 1e-3, 5e-4), 500, 5000
    c.s7_schedule = "inverse_sqrt"
    c.num_seeds, c.d2_num_seeds = 5, 15
    return c


def get_config(arg: str = "quick"):
    return preset(arg, {"quick": _base, "standard": _standard, "paper": _paper})


SCHEMA = dict(
    **s.BYTE_LM_TRAINING,
    runs=s.MODEL_SPECS,
    depths=s.DEPTHS,
    side_runs=Spec(tuple, item=Spec(str), nonempty=False),
    side_depths=Spec(tuple, item=s.POS, nonempty=False),
    d_model=s.POS,
    num_heads=s.POS,
    d_ff=s.POS,
    seq_len=s.POS,
    batch_size=s.POS,
    lr=s.POS_FLOAT,
    num_steps=s.POS,
    early_steps=s.POS,
    update_lr=s.POS_FLOAT,
    probe_every=s.POS,
    final_window=s.POS,
    s7_depths=Spec(tuple, item=s.POS, nonempty=False),  # () skips S7
    s7_lrs=Spec(tuple, item=s.POS_FLOAT),
    s7_warmup=s.SEED,
    s7_steps=s.POS,
    s7_schedule=Spec(str, choices=("constant", "inverse_sqrt")),  # linear warmup, then lr or lr sqrt(w/t)
    seed=s.SEED,
    num_seeds=s.POS,
    d2_num_seeds=s.POS,  # num_seeds or fewer: D2 over the main runs' seeds only
    d2_widths=Spec(tuple, item=s.POS, nonempty=False),
)


def check(values: dict) -> None:
    """Every run spec parses; windows fit in the runs; S7's warmup leaves steps at the peak lr; sizes build."""
    s.check_specs("deep_training", values, ("runs", "side_runs"), [])
    for key, steps in (("early_steps", "num_steps"), ("final_window", "num_steps"), ("final_window", "s7_steps")):
        if values[key] > values[steps]:
            raise ConfigError(f"config.{key}={values[key]} is longer than the run (config.{steps}={values[steps]})")
    if values["s7_warmup"] >= values["s7_steps"]:
        raise ConfigError(
            f"config.s7_warmup={values['s7_warmup']} leaves no step at the peak lr (config.s7_steps="
            f"{values['s7_steps']})"
        )
    s.check_sizes(values)
    for width in values["d2_widths"]:  # D2's wider models build too (d_model divisible by num_heads)
        s.check_sizes(values | {"d_model": width, "d_ff": 2 * width})


def largest_model(values: dict) -> tuple[normjax.ModelConfig, int, int]:
    """The deepest byte-level decoder of the main, side and S7 runs, at the widest of d_model and d2_widths."""
    depths = tuple(values["depths"]) + tuple(values["side_depths"]) + tuple(values["s7_depths"])
    vocab = {"vocab_size": len(byte_vocab())}
    width = max((values["d_model"], *values.get("d2_widths", ())))
    values = values | {"d_model": width, "d_ff": max(values["d_ff"], 2 * width)}
    cfg = s.model(
        vocab | values, arch="decoder", num_layers=max(depths), placement="pre", max_len=max(values["seq_len"], 8)
    )
    return cfg, values["batch_size"], values["seq_len"]
