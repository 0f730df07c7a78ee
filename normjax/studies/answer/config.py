"""answer presets: where the norm should sit, per depth, lr and warmup, and why (interventions), on the byte LM.

  python -m normjax.studies.answer --config=:quick --workdir=results
  python -m normjax.studies.answer --config=:standard --workdir=results   (the committed report: 41 min)
  python -m normjax.studies.answer --config=:paper --workdir=results      (budget below: for accelerators)

A decoder-only byte LM on the Python stdlib sources (bytes_lm; results.json records the sha256 of the bytes), Adam
(0.9, 0.95), H = 1/(1 - b2) = 20 steps, every arm under the fair-control schedule (warmup_then_inverse_sqrt with
one decay_start = the longest warmup, so an arm without warmup follows the warmup arms' tail exactly). Grids
(config.sweep.grids, trained through the sweep engine), then, from their outcomes, more seeds where needed:
  window       every placement x depth x lr, no warmup, one seed: the lr window (curve-based outcome labels)
  dose         Post-LN and Pre-LN at the dose depth, at the dose lr and the interventions' lrs, warmups 0, H, ..:
               the dose-response and the no-warmup baseline of every intervention, on the interventions' seeds
  gi_adam, radam, warmup_top, warmup_bottom   Post-LN at the dose depth and lr without (global) warmup: the
               interventions (GI-Adam; RAdam; a warmup of the top or of the bottom half of the stack only)
  quality      (built after the grids ran) the seeds beyond the first at each (placement, depth)'s best lr: final
               quality with intervals on the difference to Pre-LN
  sharpness    (in-process, not a sweep) Post-LN and Pre-LN at the dose depth and lr, without warmup and with
               `sharpness.warmup`: the Adam-preconditioned sharpness every `sharpness.every` steps on a fixed
               held-out batch, against Cohen et al.'s threshold (2 + 2 b1) / ((1 - b1) lr_t)

Measured cost (2026-12-05, this 2-core CPU shared with other agents): see the report (results.json `wall_time_s`
per run); warmup_ablation's committed :standard run measured 75 s per 600-step d-128 6-layer run, 122-157 s at 12
layers (one worker; about 25 s of it the first compile).
quick: d 64, depth 4, 120 steps, 4 lrs over 1.5 decades (10^-2.5 .. 10^-1), Post-LN, Pre-LN, Sandwich;
  dose {H, 2H, 4H} (4H = 80 steps: the run is 1.5x the longest warmup, short of the 3x the method asks), one seed
  on the interventions (their rows are not judged at :quick), 3 seeds at the best-lr cells. With depths 2 and 4
  it took 284 s of the 920 s of scripts/reproduce.sh's :quick (2026-12-06, idle 2 cores), over the 15-minute
  aim: depth 2 left out, and the sharpness arms train 60 steps (the 40-step warmup and 20 after; 243 -> 220 s).
standard (the committed report, CPU-sized): warmup_ablation's S5 cell, where Post-LN fails without warmup and a
  warmup of 160 steps rescues it (d 128, FFN 256, 6 layers, 600 steps, batch 8 x 64 bytes, lr 10^-2.5; its
  :standard run: 5/5 seeds stalled without warmup, 3/3 trained with warmup 160): the window of Post-LN, Pre-LN,
  Sandwich and DeepNorm at 6 layers over 4 lrs (10^-3.5 .. 10^-2), 2 more seeds at the boundary cells and the best
  lrs, the dose {0, 2H, 8H} for Post-LN and Pre-LN at 3 seeds, the four interventions at 3 seeds (layer-wise
  warmup over 8H = 160 steps, the global warmup's length), and the sharpness arms over the first 300 steps
  (the peak that A3 compares lies in the first 160). Depth 12 is warmup_ablation's (its answer table). Measured
  2026-12-06 on the 2 cores (2 workers): 60 sweep runs (46 planned, 14 more from the window's labels) at about
  100 s each per worker, then 12 sharpness runs at 55 s in one process: 2,472 s in all.
paper (budget, for accelerators): d 128 (FFN 256), 600 steps (the dose's 16H = 320 steps is then 1.9x short of the
  3x the method asks: a longer run should use 1000), 10 placements (post, pre, sandwich, deepnorm, admin, rezero,
  lns, mhc, hybrid, mixln; the recipes olmo2 and pre+qk_norm are model specs the window grid cannot sweep yet)
  costed below, and the 2025-2026 schemes (pre_gpas, sandwich_gpas, siamese, mhc_lite) on the same grids, which
  adds 4/10 to the window, boundary and quality costs (about 42,000 s); accelerator group answer24_c runs them
  at 24 layers:
    window     12 x depths {6, 12, 24} x 5 lrs (10^-3.5 .. 10^-1.5) x 1 seed: 60 x 75 + 60 x 150 + 60 x 300 s
               = 31,500 s
    boundary   2 more seeds at the cells on either side of each failure boundary (about 2 per curve, 72 curves,
               mean cost ~170 s): 2 x 144 x 170 = 49,000 s (decided from the window's labels, like quality)
    quality    2 more seeds at each curve's best lr: 72 x 2 x 170 = 24,500 s (often shared with boundary)
    dose       post/pre at depth 6 x warmups {H, 2H, 4H, 8H, 16H} x 3 seeds (0: the window's): 30 x 75 s =
               2,250 s (depth 12 as well: +4,500 s)
    interventions  post x depths {6, 12} x {gi_adam, radam, top 4H, bottom 4H} x 2 lrs x 3 seeds: 48 x ~112 =
               5,400 s
    sharpness  4 arms x depths {6, 12} x 3 seeds, probes every 50 steps (30 Lanczos steps each): ~24 x 250 =
               6,000 s
  about 130,000 s of one core (172,000 s with the 2025-2026 schemes): 18 (24) hours on the 2 cores, beyond one
  session; on one H200 (the accelerator check's 4-10 ms steps) about 1-2 (2-3) hours. :standard is the part of
  it that decides A1-A5 at the S5 cell.
"""

from __future__ import annotations

import ml_collections

from normjax.train.config_io import default_config, sweep_axes

MAIN = ("post", "pre")
SIDE = "answer"  # the study's own section (stripped before the sweep engine sees the config)


def horizon(b2: float) -> int:
    """Adam's second-moment horizon 1/(1 - b2), in steps."""
    return round(1.0 / (1.0 - b2))


def _byte_lm(config, d_model, d_ff, depth, num_steps, seq_len=64, batch_size=8):
    config.model.update(
        arch="decoder", d_model=d_model, num_heads=4, d_ff=d_ff, num_layers=depth, dropout=0.0, placement="pre",
        scan_layers=False,
    )  # fmt: skip
    config.data.update(task="bytes_lm", seq_len=seq_len, max_bytes=2_000_000, valid_batches=32)
    config.sweep.workers = 0  # one worker process per CPU core
    config.train.update(
        optimizer="adam", b1=0.9, b2=0.95, eps=1e-8, num_steps=num_steps, batch_size=batch_size,
        label_smoothing=0.0, clip_norm=0.0, log_every=num_steps // 6, eval_every=num_steps // 6,
        checkpoint_every=num_steps // 2, bleu_examples=0, diag_every=0, schedule="warmup_then_inverse_sqrt",
        warmup_steps=0,
    )  # fmt: skip
    return config


def add_grids(config, placements, depths, lrs, dose_depth, dose_lr, dose_horizons, intervention_lrs,
              intervention_seeds, layer_horizons, seed_count, sharpness_every, sharpness_dim,
              boundary_seeds=0, sharpness_steps=0):  # fmt: skip
    """The grids of a preset (module docstring) and the study's own section (`sharpness_steps`: how long the
    sharpness arms train, 0 = the whole run)."""
    h = horizon(config.train.b2)
    warmups = [k * h for k in dose_horizons]
    config.train.decay_start = max(warmups)  # the fair control: every arm decays from the same step
    seeds = [config.train.seed + k for k in range(seed_count)]
    post = {"model.placement": ["post"], "model.num_layers": [dose_depth], "train.warmup_steps": [0]}
    arm = post | {"train.lr": intervention_lrs, "train.seed": seeds[:intervention_seeds]}
    config.sweep.grids = {
        "window": sweep_axes(
            {"model.placement": list(placements), "model.num_layers": list(depths), "train.lr": list(lrs),
             "train.warmup_steps": [0], "train.seed": seeds[:1]}
        ),
        "dose": sweep_axes(
            {"model.placement": list(MAIN), "model.num_layers": [dose_depth],
             "train.lr": sorted({dose_lr, *intervention_lrs}), "train.warmup_steps": [0, *warmups],
             "train.seed": seeds[:intervention_seeds]}
        ),
        "gi_adam": sweep_axes(arm | {"train.optimizer": ["gi_adam"]}),
        "radam": sweep_axes(arm | {"train.optimizer": ["radam"]}),
        "warmup_top": sweep_axes(arm | {"train.optimizer": [f"adam_warmup_top_{layer_horizons}h"]}),
        "warmup_bottom": sweep_axes(arm | {"train.optimizer": [f"adam_warmup_bottom_{layer_horizons}h"]}),
    }  # fmt: skip
    config[SIDE] = ml_collections.ConfigDict(
        {"num_seeds": seed_count, "reference": "pre", "dose_depth": dose_depth, "dose_lr": dose_lr,
         "layer_warmup": layer_horizons * h, "sharpness_every": sharpness_every, "sharpness_dim": sharpness_dim,
         "sharpness_warmup": layer_horizons * h, "sharpness_seeds": intervention_seeds,
         "boundary_seeds": boundary_seeds, "sharpness_steps": sharpness_steps}
    )  # fmt: skip
    return config


def quick_scale():
    config = _byte_lm(default_config(), d_model=64, d_ff=128, depth=2, num_steps=120)
    return add_grids(
        config, placements=("post", "pre", "sandwich"), depths=(4,), lrs=[10**-2.5, 1e-2, 10**-1.5, 1e-1],
        dose_depth=4, dose_lr=1e-2, dose_horizons=(1, 2, 4), intervention_lrs=[1e-2], intervention_seeds=1,
        layer_horizons=2, seed_count=3, sharpness_every=20, sharpness_dim=16, sharpness_steps=60,
    )  # fmt: skip


def standard_scale():
    config = _byte_lm(default_config(), d_model=128, d_ff=256, depth=6, num_steps=600)
    return add_grids(
        config, placements=("post", "pre", "sandwich", "deepnorm"), depths=(6,),
        lrs=[10 ** (k / 2) for k in range(-7, -3)], dose_depth=6, dose_lr=10**-2.5, dose_horizons=(2, 8),
        intervention_lrs=[10**-2.5], intervention_seeds=3, layer_horizons=8, seed_count=3, sharpness_every=40,
        sharpness_dim=16, boundary_seeds=2, sharpness_steps=300,
    )  # fmt: skip


def paper_scale():
    config = _byte_lm(default_config(), d_model=128, d_ff=256, depth=6, num_steps=600)
    return add_grids(
        config, placements=("post", "pre", "sandwich", "deepnorm", "admin", "rezero", "lns", "mhc", "hybrid",
                            "mixln", "pre_gpas", "sandwich_gpas", "siamese", "mhc_lite"),
        depths=(6, 12, 24), lrs=[10 ** (k / 2) for k in range(-7, -2)], dose_depth=6, dose_lr=10**-2.5,
        dose_horizons=(1, 2, 4, 8, 16), intervention_lrs=[1e-3, 10**-2.5], intervention_seeds=3, layer_horizons=4,
        seed_count=3, sharpness_every=50, sharpness_dim=30, boundary_seeds=2,
    )  # fmt: skip


def get_config(arg: str = "quick"):
    presets = {"quick": quick_scale, "standard": standard_scale, "paper": paper_scale}
    if arg not in presets:
        raise ValueError(f"unknown preset {arg!r}; valid: {', '.join(presets)}")
    return presets[arg]()
