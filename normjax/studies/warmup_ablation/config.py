"""Warmup ablation (claims S5, X7, X8, R7): placement x lr x warmup, depth x lr and optimizer arms, 3 seeds.

  python -m normjax.studies.warmup_ablation --config=:quick \
      --workdir=/tmp/wa
  python -m normjax.studies.warmup_ablation --config=:paper \
      --workdir=/tmp/wa_paper --config.data.path=data/iwslt14.tokenized.de-en [--shard=0/4]

Every preset is one sweep (config.sweep.axes) plus sub-grids (config.sweep.grids) over the same base config:
  axes       placement x peak lr x warmup x seed, Xiong et al.'s inverse-sqrt decay after the linear warmup;
  constant   the control arm: the same cells with the lr held constant after the warmup;
  depth_lr   placement x depth x lr without warmup: the critical lr (the smallest lr at which a placement
             stalls or diverges) at each depth (the main grid's depth is the model's num_layers);
  adam999 / radam / sgd   the Adam-variance explanation (Liu et al. 2020): without warmup at the lrs of the main
             grid, Adam with beta2 0.999 instead of 0.98, RAdam, and SGD with momentum 0.9 (at its own lrs).
Runs are at least 10x the longest warmup. The seeds are the sweep axis train.seed (config.train.seed ..
seed + 2; `--config.train.seed=s` shifts every seed axis, it does not collapse it).

quick (4.6 CPU minutes: 275 s of CPU time, 15 min of wall time while 5 other jobs shared the 2 cores): a 2-2
layer d=32 encoder-decoder on the synthetic translation task, 57 runs of 150 steps.
standard (about 23 CPU minutes, estimated from 4 timed runs): d=64, depths 2 and 6, 3 lrs, 84 runs of 250 steps.
paper (accelerators): Xiong et al.'s Fig. 2 grid on IWSLT14 De-En (6-6 layers, d 512), lr {5e-4, 1e-3} x warmup
{0, 500, 4000}, 50k steps, with the depth x lr and optimizer arms at the same scale.
"""

from normjax.train.config_io import default_config, sweep_axes
from normjax.train.presets import paper_scale

NUM_SEEDS = 3


def _seeds(config) -> list[int]:
    return [config.train.seed + k for k in range(NUM_SEEDS)]


def add_grids(
    config, lrs, warmups, depths, control_lrs, sgd_lrs, opt_lrs, arm_placements=("post", "pre"), depth_lrs=None
):
    """The main grid (config.sweep.axes) and the sub-grids (config.sweep.grids) of a preset; the depth x lr grid
    runs at `depth_lrs` (default: the main grid's lrs)."""
    seeds = _seeds(config)
    both, arms = ["post", "pre"], list(arm_placements)
    config.sweep.axes = sweep_axes(
        {"model.placement": both, "train.lr": lrs, "train.warmup_steps": warmups, "train.seed": seeds}
    )
    no_warmup = {"train.warmup_steps": [0]}
    grids = {
        "constant": {
            "train.schedule": ["constant"],
            "model.placement": both,
            "train.lr": control_lrs,
            "train.warmup_steps": warmups,
            "train.seed": seeds,
        },
        "depth_lr": {"model.placement": both, "model.num_layers": depths, "train.lr": depth_lrs or lrs} | no_warmup,
        "adam999": {"train.b2": [0.999], "model.placement": arms, "train.lr": opt_lrs} | no_warmup,
        "radam": {"train.optimizer": ["radam"], "model.placement": arms, "train.lr": opt_lrs} | no_warmup,
        "sgd": {"train.optimizer": ["sgd"], "model.placement": arms, "train.lr": sgd_lrs} | no_warmup,
    }
    for name in ("depth_lr", "adam999", "radam", "sgd"):
        grids[name]["train.seed"] = seeds
    config.sweep.grids = {name: sweep_axes(axes) for name, axes in grids.items()}
    return config


def _cpu_scale(config, d_model, num_layers, num_steps):
    config.model.update(
        d_model=d_model, num_heads=4, d_ff=2 * d_model, num_layers=num_layers, dropout=0.0, placement="post"
    )
    config.data.update(task="synthetic", max_len=16, buckets=(), num_train=20_000, num_valid=256)
    config.train.update(
        optimizer="adam",
        b1=0.9,
        b2=0.98,
        eps=1e-9,
        schedule="inverse_sqrt",
        num_steps=num_steps,
        batch_size=32,
        label_smoothing=0.1,
        log_every=5,
        eval_every=num_steps // 2,
        checkpoint_every=num_steps // 2,
        bleu_examples=0,
        diag_every=0,
    )
    return config


def quick_scale(config):
    """d 32, 2-2 layers (4-4 in depth_lr), 150 steps (10x the warmup of 15); optimizer arms on Post-LN only."""
    config = _cpu_scale(config, 32, 2, 150)
    return add_grids(
        config,
        lrs=[1e-2, 3e-2],
        warmups=[0, 15],
        depths=[4],
        control_lrs=[3e-2],
        sgd_lrs=[0.3],
        opt_lrs=[3e-2],
        arm_placements=("post",),
    )


def standard_scale(config):
    """d 64, 2-2 layers (6-6 in depth_lr), 250 steps (10x the warmup of 25)."""
    config = _cpu_scale(config, 64, 2, 250)
    return add_grids(
        config,
        lrs=[3e-3, 1e-2, 3e-2],
        warmups=[0, 25],
        depths=[6],
        control_lrs=[3e-2],
        sgd_lrs=[0.3],
        opt_lrs=[3e-2],
    )


def paper_grid(config):
    """Xiong et al.'s Fig. 2 grid on IWSLT14 (50k steps, 12x the warmup of 4000) and the arms at that scale."""
    config = paper_scale(config)
    return add_grids(
        config,
        lrs=[5e-4, 1e-3],
        warmups=[0, 500, 4000],
        depths=[6, 12, 18],
        depth_lrs=[2.5e-4, 5e-4, 1e-3, 2e-3],
        control_lrs=[5e-4, 1e-3],
        sgd_lrs=[0.03, 0.1],
        opt_lrs=[5e-4, 1e-3],
    )


def get_config(arg: str = "quick"):
    presets = {"quick": quick_scale, "standard": standard_scale, "paper": paper_grid}
    if arg not in presets:
        raise ValueError(f"unknown preset {arg!r}; valid: {', '.join(presets)}")
    return presets[arg](default_config())
