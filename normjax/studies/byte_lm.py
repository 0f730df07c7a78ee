"""The byte LM that the studies training in-process share (deep_training, trained_layers): model, data, hparams."""

from __future__ import annotations

import functools
import math

import normjax
from normjax import specs
from normjax import train as nt
from normjax.train import data_text, job


def model_config(config, run: str, depth: int, scan_layers: bool) -> normjax.ModelConfig:
    """The decoder-only byte LM at `depth`; `run` is a model spec (`normjax.specs`: "pre", "pre:dyt", "mixln")."""
    return normjax.ModelConfig(
        arch="decoder",
        vocab_size=len(nt.byte_vocab()),
        d_model=config.d_model,
        num_heads=config.num_heads,
        d_ff=config.d_ff,
        num_layers=depth,
        scan_layers=scan_layers,
        max_len=config.seq_len,
        **specs.parse(run).fields,
    )


@functools.lru_cache(maxsize=2)
def _corpus(max_bytes: int) -> dict:
    return nt.load_byte_corpus(max_bytes=max_bytes)


def data(config, seed: int):
    """(training batches in seed `seed`'s order, the fixed held-out batch x on which F(x, theta_t) is probed)."""
    corpus, spec = _corpus(config.max_bytes), nt.BatchSpec(batch_size=config.batch_size)
    train = nt.LMBatches(corpus["train"], config.seq_len, spec, seed=config.data_seed + seed)
    return train, nt.LMBatches(corpus["valid"], config.seq_len, spec, shuffle=False).batch(0)


def data_record(config) -> dict:
    """What names the data: the sha256 of the corpus bytes read (train and valid) and where they came from."""
    return data_text.byte_corpus_record(max_bytes=config.max_bytes) | {"task": "bytes_lm (stdlib sources)"}


def hparams(config, vocab_size: int, lr: float, warmup: int, num_steps: int) -> dict:
    """Linear warmup over `warmup` steps (0: lr from the first update), no clipping, smoothing or weight decay."""
    train = nt.TrainConfig(
        lr=lr,
        warmup_steps=warmup,
        num_steps=num_steps,
        end_lr=lr,
        label_smoothing=0.0,
        divergence_loss=config.divergence_factor * math.log(vocab_size),
        divergence_patience=config.divergence_patience,
    )  # warmup_init_lr, weight_decay, clip_norm, decay_start: 0 (TrainConfig's defaults)
    return job.train_hparams(train, config.d_model, vocab_size)
