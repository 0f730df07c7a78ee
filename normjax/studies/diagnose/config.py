"""diagnose presets: any normjax model config (every ModelConfig field is a --config.model.<field> flag).

  python -m normjax.studies.diagnose --config=:quick --workdir=results \
      --config.model.placement=post --config.model.num_layers=12
  # and a 30-step probe training at the run's lr, warmup and optimizer (config.data / config.train: the keys of
  # experiments.train, e.g. --config.train.lr=1e-3 --config.train.warmup_steps=0 --config.train.schedule=constant)
  python -m normjax.studies.diagnose --workdir=results --config.model.num_layers=24 --config.probe_steps=30 \
      --config.train.lr=1e-3 --config.train.warmup_steps=0
"""

import dataclasses

import ml_collections

import normjax
from normjax.jacobian.spectral import METHODS
from normjax.studies import schema as s
from normjax.studies.diagnose import probe
from normjax.studies.diagnose.probe import threshold_values
from normjax.studies.presets import preset
from normjax.train import default_config
from normjax.train.config_io import ConfigError
from normjax.train.config_schema import Spec


def model_section() -> ml_collections.ConfigDict:
    """Every ModelConfig field with its default (None defaults as typed placeholders, settable from flags)."""
    section = default_config().model  # the training configs' model section, built from ModelConfig
    defaults = {f.name: f.default for f in dataclasses.fields(normjax.ModelConfig)}
    section.update({k: defaults[k] for k in ("arch", "vocab_size", "max_len")})  # training fills these from data
    return section


def _base():
    c = ml_collections.ConfigDict()
    c.model = model_section()
    c.model.update(d_model=64, num_heads=4, d_ff=256, num_layers=6, placement="post")
    c.batch_size, c.seq_len = 8, 16  # random tokens; targets are random tokens too
    c.num_batches = 4  # gradient norms over this many batches: mean of ||g_b|| and ||mean of g_b||
    c.seed = 0
    c.jacobian_method = "auto"  # block spectral norms: exact up to n = 1024 inputs, else Lanczos
    c.jacobian_seq_len = 8  # ... on the first tokens of one sequence: n = jacobian_seq_len * d_model
    c.thresholds = ml_collections.ConfigDict(
        dict(
            grad_ratio=4.0,  # FFN gradient norm changes more than this from the top layer to the bottom one
            stream_growth=4.0,  # rms of the residual stream grows more than this over the stack
            ln_jacobian=0.25,  # ||dN/dz|| below this at some norm: gradients through it shrink 4x or more
            block_norm=10.0,  # a block's Jacobian norm above this: perturbations grow 10x in one block
        )
        | threshold_values()  # the probe's: update, ln_growth, grad_collapse (justified in diagnose_probe)
    )
    # The probe: probe_steps updates of config.model trained as experiments.train would train it on config.data
    # with config.train (vocab and lengths from the data). 0 = off (diagnose then measures the model at init only).
    c.probe_steps = 0
    c.data = default_config().data
    c.data.task = ""  # "" = the arch's task: bytes_lm for a decoder, synthetic for an encoder_decoder
    c.train = default_config().train
    c.train.num_steps = 100_000  # the run's length: only the linear and cosine decays read it
    return c


def _paper():
    c = _base()
    c.model.update(
        arch="encoder_decoder", vocab_size=10_000, d_model=512, num_heads=4, d_ff=1024, num_layers=6, max_len=512
    )  # Xiong et al.'s IWSLT 6-6 model
    c.batch_size, c.seq_len, c.num_batches, c.jacobian_seq_len = 16, 64, 16, 64
    return c


def get_config(arg: str = "quick"):
    return preset(arg, {"quick": _base, "paper": _paper})


SCHEMA = dict(
    model=None,  # every ModelConfig field: checked by ModelConfig itself
    batch_size=s.POS,
    seq_len=s.POS,
    num_batches=s.POS,
    seed=s.SEED,
    jacobian_method=Spec(str, choices=METHODS),
    jacobian_seq_len=s.POS,
    thresholds=dict(
        grad_ratio=s.POS_FLOAT,
        stream_growth=s.POS_FLOAT,
        ln_jacobian=s.POS_FLOAT,
        block_norm=s.POS_FLOAT,
        update=s.POS_FLOAT,
        ln_growth=s.POS_FLOAT,
        grad_collapse=s.POS_FLOAT,
    ),
    probe_steps=s.SEED,  # 0 = no probe training
    data=None,  # experiments.train's sections: checked by normjax.train.parse (probe.run_config)
    train=None,
)


def check(values: dict) -> None:
    """The model builds; the Jacobian's tokens fit in the sequence; the probe run parses and is long enough."""
    s.check_unknown("config.model", values["model"], [f.name for f in dataclasses.fields(normjax.ModelConfig)])
    try:
        cfg = normjax.ModelConfig(**values["model"])  # missing fields take ModelConfig's defaults
    except (TypeError, ValueError) as e:
        raise ConfigError(f"config.model: {e}") from None
    states = {"dual": "ResiDual's pair of streams (x, d)", "hyper": "hyper-connections' n streams"}
    for stack in cfg.stacks:
        state = "the speedrun's SkipStream (x, x0, v1)" if cfg.has_skips else states.get(cfg.stream_kind(stack))
        if state:
            raise ConfigError(
                f"config.model: diagnose probes blocks that map one residual stream, and the {stack} stack's blocks "
                f"map {state}; probe it with normjax.probe (StackProbes) instead"
            )
    if values["seq_len"] > cfg.max_len:
        raise ConfigError(f"config.seq_len={values['seq_len']} is longer than config.model.max_len={cfg.max_len}")
    if values["jacobian_seq_len"] > values["seq_len"]:
        raise ConfigError(
            f"config.jacobian_seq_len={values['jacobian_seq_len']} is longer than config.seq_len={values['seq_len']}"
        )
    probe_run = probe.run_config(values)  # the probe's run: ConfigError naming the key
    if values["probe_steps"] > probe_run.train.num_steps:
        raise ConfigError(
            f"config.probe_steps={values['probe_steps']} is longer than the run "
            f"(config.train.num_steps={probe_run.train.num_steps})"
        )


def largest_model(values: dict) -> tuple[normjax.ModelConfig, int, int]:
    """The one model diagnosed, at its batch."""
    return normjax.ModelConfig(**values["model"]), values["batch_size"], values["seq_len"]
