"""The typed configs of a run: data and train sections (fields, defaults, valid ranges)."""

import dataclasses
import json
import math

from normjax.train.completep import PARAMETRIZATIONS
from normjax.train.optimizers import OPTIMIZERS
from normjax.train.schedules import SCHEDULES

TASKS = ("synthetic", "bytes_lm", "iwslt14", "gettext")


@dataclasses.dataclass(frozen=True)
class Spec:
    """What one config value may be: its type, a range (numbers) or choices; tuples check every item.

    `kind` is bool, int, float, str or tuple (then `item` is the items' Spec; `choices` of a str are
    a closed set). Numbers must be finite; an int is accepted for a float; a bool is never a number.
    """

    kind: type
    lo: float | None = None
    hi: float | None = None  # exclusive
    lo_open: bool = False
    choices: tuple | None = None
    item: "Spec | None" = None
    nonempty: bool = True  # tuples

    def check(self, key: str, value):
        """The value, coerced (int -> float, list -> tuple); raises ValueError naming `key` if invalid."""
        if self.kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if self.kind is tuple and isinstance(value, list):
            value = tuple(value)
        if not isinstance(value, self.kind) or (self.kind in (int, float) and isinstance(value, bool)):
            raise ValueError(f"{key}={value!r} must be of type {self.kind.__name__}")
        if self.kind is float and not math.isfinite(value):
            raise ValueError(f"{key}={value!r} is invalid: must be a finite number")
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"{key}={value!r} is invalid; valid choices: {', '.join(map(str, self.choices))}")
        if self.lo is not None and (value < self.lo or (self.lo_open and value == self.lo)):
            raise ValueError(f"{key}={value!r} is invalid: must be {'>' if self.lo_open else '>='} {self.lo}")
        if self.hi is not None and value >= self.hi:
            raise ValueError(f"{key}={value!r} is invalid: must be < {self.hi}")
        if self.kind is tuple:
            if self.nonempty and not value:
                raise ValueError(f"{key}=() is invalid: must not be empty")
            if self.item is not None:
                value = tuple(self.item.check(f"{key}[{i}]", v) for i, v in enumerate(value))
        return value


def _f(default, lo=None, hi=None, choices=None, lo_open=False, kind=None):
    """A dataclass field with its Spec (type, valid range / choices) as metadata["spec"]."""
    kind = kind or type(default)
    spec = Spec(kind, lo=lo, hi=hi, lo_open=lo_open, choices=choices)
    return dataclasses.field(default=default, metadata={"spec": spec})


_BUCKETS = Spec(tuple, item=Spec(int, lo=2), nonempty=False)
_PREFIXES = Spec(tuple, item=Spec(str), nonempty=False)


@dataclasses.dataclass(frozen=True)
class DataConfig:
    task: str = _f("synthetic", choices=TASKS)
    # iwslt14: folder of {train,valid,test}.{de,en}; bytes_lm: text folder ("" = stdlib); gettext: a folder
    # built by normjax.train.data_gettext ("" = built from this machine's catalogs into the cache)
    path: str = _f("")
    max_len: int = _f(32, lo=2)  # longest sequence kept (eos included); the largest bucket
    # extra, smaller padded lengths (each its own compiled shape)
    buckets: tuple = dataclasses.field(default=(), metadata={"spec": _BUCKETS})
    seq_len: int = _f(128, lo=2)  # bytes_lm chunk length
    max_bytes: int = _f(4_000_000, lo=1)
    suffix: str = _f(".py")
    min_count: int = _f(1, lo=1)  # iwslt14 vocabulary
    src_lang: str = _f("de")
    tgt_lang: str = _f("en")
    # gettext, when it builds its corpus (data.path ""): install prefixes (() = Python's, /usr/local, /usr)
    catalog_prefixes: tuple = dataclasses.field(default=(), metadata={"spec": _PREFIXES})
    min_pairs: int = _f(1000, lo=1)
    bpe_vocab_size: int = _f(8000, lo=8)
    num_train: int = _f(50_000, lo=1)  # synthetic
    num_valid: int = _f(500, lo=1)
    num_test: int = _f(500, lo=1)
    synthetic_seed: int = _f(0, lo=0)
    valid_batches: int = _f(0, lo=0)  # 0 = the whole validation split


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    optimizer: str = _f("adam", choices=OPTIMIZERS)
    b1: float = _f(0.9, lo=0.0, hi=1.0)
    b2: float = _f(0.98, lo=0.0, hi=1.0)
    eps: float = _f(1e-9, lo=0.0, lo_open=True)
    momentum: float = _f(0.9, lo=0.0, hi=1.0)
    nesterov: bool = _f(False)
    weight_decay: float = _f(0.0, lo=0.0)
    # "completep": CompleteP's per-group lr / eps / weight decay (normjax.train.completep) relative to a base of
    # depth model.branch_multiplier_base_depth and width base_width (0 = model.d_model); Adam / AdamW only
    parametrization: str = _f("standard", choices=PARAMETRIZATIONS)
    base_width: int = _f(0, lo=0)
    lr: float = _f(5e-4, lo=0.0, lo_open=True)
    schedule: str = _f("inverse_sqrt", choices=SCHEDULES)
    warmup_steps: int = _f(4000, lo=0)
    warmup_init_lr: float = _f(0.0, lo=0.0)
    end_lr: float = _f(0.0, lo=0.0)
    decay_start: int = _f(0, lo=0)  # warmup_then_inverse_sqrt: decay from max(decay_start, warmup_steps)
    noam_d_model: int = _f(0, lo=0)  # 0 = model.d_model
    num_steps: int = _f(1000, lo=1)
    batch_size: int = _f(32, lo=1)
    max_tokens: int = _f(0, lo=0)  # > 0: token budget per batch instead of batch_size sequences
    seed: int = _f(0, lo=0)
    clip_norm: float = _f(0.0, lo=0.0)  # 0 = no clipping
    label_smoothing: float = _f(0.1, lo=0.0, hi=1.0)
    log_every: int = _f(10, lo=1)
    eval_every: int = _f(500, lo=1)
    bleu_examples: int = _f(200, lo=0)  # greedy-decoded valid sentences for the final BLEU (seq2seq)
    checkpoint_every: int = _f(500, lo=1)
    keep_checkpoints: int = _f(2, lo=1)
    divergence_loss: float = _f(0.0, lo=0.0)  # 0 = 1.5 ln(vocab size)
    divergence_patience: int = _f(20, lo=1)
    divergence_check_every: int = _f(10, lo=1)
    diag_every: int = _f(0, lo=0)  # 0 = no per-layer diagnostics
    tensorboard: bool = _f(False)
    wandb_project: str = _f("")  # "" = off; else also log to this Weights & Biases project (needs wandb)


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """One validated job; `model` holds ModelConfig fields (vocab_size, max_len 0: from data)."""

    model: dict
    data: DataConfig
    train: TrainConfig

    def to_dict(self) -> dict:
        return {
            "model": dict(self.model),
            "data": dataclasses.asdict(self.data),
            "train": dataclasses.asdict(self.train),
        }


# The traced hyperparameters of one compiled train step (steps.HPARAMS, the keys of TrainState.hparams), each
# with the TrainConfig field it is read from (job.train_hparams): changing them never recompiles a step.
HPARAM_FIELDS = {
    "lr": "lr",
    "warmup_steps": "warmup_steps",
    "warmup_init_lr": "warmup_init_lr",
    "total_steps": "num_steps",
    "end_lr": "end_lr",
    "d_model": "noam_d_model",  # 0 = model.d_model
    "weight_decay": "weight_decay",
    "clip_norm": "clip_norm",
    "label_smoothing": "label_smoothing",
    "divergence_loss": "divergence_loss",  # 0 = 1.5 ln(vocab size)
    "divergence_patience": "divergence_patience",
    "decay_start": "decay_start",
}

# Train fields that are traced values of one compiled step: runs differing only in these share shapes. They are
# the fields of HPARAM_FIELDS but num_steps (the loop's length) and the seed (the state's rng key). The seed also
# orders the data, so runs with different seeds see equal batch shapes at every step only when there is a single
# bucket: it stays last (shape_key drops it from TRACED otherwise).
TRACED = tuple(field for name, field in HPARAM_FIELDS.items() if name != "total_steps") + ("seed",)


def shape_key(run: RunConfig) -> str:
    """Runs with equal keys can be trained in lockstep by one vmapped step."""
    values = run.to_dict()
    one_shape = run.data.task == "bytes_lm" or set(run.data.buckets) <= {run.data.max_len}
    traced = TRACED if one_shape else TRACED[:-1]
    values["train"] = {k: v for k, v in values["train"].items() if k not in traced}
    return json.dumps(values, sort_keys=True, default=str)
