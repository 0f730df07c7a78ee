"""One training job: synthetic translation (quick) or IWSLT14 De-En at Xiong et al.'s scale (paper).

  python -m normjax.experiments.train --config=:quick --workdir=/tmp/run
  python -m normjax.experiments.train --config=:paper --workdir=/tmp/iwslt \
      --config.data.path=data/iwslt14.tokenized.de-en --config.model.placement=pre
"""

from normjax.train.config_io import default_config


def paper_scale(config):
    """X7/X8: 6-6 enc-dec, d 512, FFN 1024, 4 heads, dropout 0.1, label smoothing 0.1,
    Adam (0.9, 0.98),
    inverse-sqrt decay, on local IWSLT14 De-En files (scripts/prepare_iwslt14.sh)."""
    config.model.update(d_model=512, num_heads=4, d_ff=1024, num_layers=6, dropout=0.1)
    config.data.update(
        task="iwslt14",
        path="data/iwslt14.tokenized.de-en",
        max_len=128,
        buckets=(16, 32, 48, 64, 96),
        min_count=1,
    )
    config.train.update(
        optimizer="adam",
        b1=0.9,
        b2=0.98,
        eps=1e-8,
        lr=5e-4,
        schedule="inverse_sqrt",
        warmup_steps=4000,
        warmup_init_lr=1e-7,
        label_smoothing=0.1,
        max_tokens=4096,
        num_steps=50_000,
        log_every=100,
        eval_every=1000,
        checkpoint_every=1000,
        bleu_examples=1000,
        diag_every=1000,
    )
    return config


def quick_scale(config):
    """A few CPU minutes: a 2-2 d=64 model on the synthetic translation task."""
    config.model.update(d_model=64, num_heads=4, d_ff=128, num_layers=2, placement="post")
    config.data.update(task="synthetic", max_len=32, num_train=20_000, num_valid=256)
    config.train.update(
        lr=3e-3,
        schedule="constant",
        warmup_steps=100,
        num_steps=400,
        batch_size=32,
        log_every=10,
        eval_every=100,
        checkpoint_every=100,
        bleu_examples=128,
        diag_every=100,
    )
    return config


def get_config(arg: str = "quick"):
    config = default_config()
    presets = {"quick": quick_scale, "paper": paper_scale}
    if arg not in presets:
        raise ValueError(f"unknown preset {arg!r}; valid: {', '.join(presets)}")
    return presets[arg](config)
