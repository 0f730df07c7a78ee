"""Warmup ablation (claims S5, X7): Post-LN vs Pre-LN over peak learning rates and warmup lengths.

  python -m experiments.warmup_ablation --config=experiments/configs/warmup_ablation.py:quick \
      --workdir=/tmp/wa
  python -m experiments.warmup_ablation --config=experiments/configs/warmup_ablation.py:paper \
      --workdir=/tmp/wa_paper --config.data.path=data/iwslt14.tokenized.de-en [--shard=0/4]

quick: a 4-4 layer d=64 encoder-decoder on the synthetic translation task, 2 x 3 x 3 runs of 200 steps
(about 5-8 CPU minutes). The lr is held constant after the linear warmup so that the warmup length is
the only difference between runs of one lr (with inverse-sqrt decay, warmup 0 would also mean a much
smaller lr for the whole short run).
paper: Xiong et al.'s Fig. 2 grid on IWSLT14 De-En, lr {5e-4, 1e-3} x warmup {0, 500, 4000},
inverse-sqrt decay (see train.py:paper for the model and optimizer).
"""

from normjax.experiments.configs.train import paper_scale
from normjax.train.config_io import default_config, sweep_axes


def quick_scale(config):
    config.model.update(d_model=64, num_heads=4, d_ff=128, num_layers=4, dropout=0.0)
    config.data.update(task="synthetic", max_len=24, buckets=(12,), num_train=20_000, num_valid=256)
    config.train.update(
        schedule="constant",
        num_steps=200,
        batch_size=32,
        label_smoothing=0.1,
        log_every=10,
        eval_every=100,
        checkpoint_every=100,
        bleu_examples=128,
        diag_every=50,
    )
    config.sweep.axes = sweep_axes(
        {
            "model.placement": ["post", "pre"],
            "train.lr": [1e-3, 3e-3, 1e-2],
            "train.warmup_steps": [0, 40, 160],
        }
    )
    return config


def paper_grid(config):
    config = paper_scale(config)
    config.sweep.axes = sweep_axes(
        {
            "model.placement": ["post", "pre"],
            "train.lr": [5e-4, 1e-3],
            "train.warmup_steps": [0, 500, 4000],
        }
    )
    return config


def get_config(arg: str = "quick"):
    presets = {"quick": quick_scale, "paper": paper_grid}
    if arg not in presets:
        raise ValueError(f"unknown preset {arg!r}; valid: {', '.join(presets)}")
    return presets[arg](default_config())
