"""Training: data, schedules, optimizers, pure steps, the job loop, checkpoints and sweeps."""

from normjax.train.batching import BatchSpec, LMBatches, Seq2SeqBatches
from normjax.train.checkpoint import Checkpointer
from normjax.train.cli import exit_on_config_error, parse_flags, setup_devices
from normjax.train.config_io import (
    ConfigError,
    DataConfig,
    RunConfig,
    TrainConfig,
    default_config,
    parse,
    sweep_axes,
)
from normjax.train.data_synthetic import SyntheticSpec, make_synthetic
from normjax.train.data_text import byte_vocab, load_byte_corpus, load_parallel
from normjax.train.decode import corpus_bleu, greedy_decode
from normjax.train.job import compiled
from normjax.train.loop import run_group, run_job
from normjax.train.optimizers import OPTIMIZERS, OptimizerSpec
from normjax.train.schedules import SCHEDULES, learning_rate
from normjax.train.sharding import data_mesh, replicate, shard_batch
from normjax.train.steps import (
    HPARAMS,
    StepSpec,
    TrainState,
    diagnostics,
    eval_step,
    init_state,
    train_step,
)
from normjax.train.sweep import expand, format_table, parse_shard, run_sweep
from normjax.train.vocab import Vocab

__all__ = [
    "HPARAMS",
    "OPTIMIZERS",
    "SCHEDULES",
    "BatchSpec",
    "Checkpointer",
    "ConfigError",
    "DataConfig",
    "LMBatches",
    "OptimizerSpec",
    "RunConfig",
    "Seq2SeqBatches",
    "StepSpec",
    "SyntheticSpec",
    "TrainConfig",
    "TrainState",
    "Vocab",
    "byte_vocab",
    "compiled",
    "corpus_bleu",
    "data_mesh",
    "default_config",
    "diagnostics",
    "eval_step",
    "exit_on_config_error",
    "expand",
    "format_table",
    "greedy_decode",
    "init_state",
    "learning_rate",
    "load_byte_corpus",
    "load_parallel",
    "make_synthetic",
    "parse",
    "parse_flags",
    "parse_shard",
    "replicate",
    "run_group",
    "run_job",
    "run_sweep",
    "setup_devices",
    "shard_batch",
    "sweep_axes",
    "train_step",
]
