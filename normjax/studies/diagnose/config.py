"""diagnose presets: any model config (every ModelConfig field is a --config.model.<field> flag).

  python -m experiments.diagnose --config=experiments/configs/diagnose.py:quick --workdir=results \
      --config.model.placement=post --config.model.num_layers=12
  # and a 30-step probe training at the run's lr, warmup and optimizer (config.data / config.train: the keys of
  # experiments.train, e.g. --config.train.lr=1e-3 --config.train.warmup_steps=0 --config.train.schedule=constant)
  python -m experiments.diagnose --workdir=results --config.model.num_layers=24 --config.probe_steps=30 \
      --config.train.lr=1e-3 --config.train.warmup_steps=0
"""

import dataclasses

import ml_collections

import normjax
from normjax.experiments.configs import preset
from normjax.studies.diagnose_probe import threshold_values
from normjax.train import default_config


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
