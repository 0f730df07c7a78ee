"""Experiment configs: defaults, validation into typed dataclasses, errors before any compute."""

import dataclasses
import difflib
import hashlib
import math
import os
import re
import types
import typing
from typing import Any

import ml_collections
from ml_collections import config_dict

import normjax
from normjax.train.config_schema import DataConfig, RunConfig, TrainConfig
from normjax.train.data_text import IWSLT_FILES

SECTIONS = ("model", "data", "train", "sweep")
_TASK_ARCH = {
    "synthetic": "encoder_decoder",
    "iwslt14": "encoder_decoder",
    "gettext": "encoder_decoder",
    "bytes_lm": "decoder",
}


class ConfigError(ValueError):
    """An invalid config; the message names the key and, where there are any, the valid choices."""


def _model_defaults() -> dict:
    fields = {f.name: f.default for f in dataclasses.fields(normjax.ModelConfig)}
    return fields | {"arch": "encoder_decoder", "vocab_size": 0, "max_len": 0}


def _section(defaults: dict, optional_types: dict) -> ml_collections.ConfigDict:
    values = {k: config_dict.placeholder(optional_types[k]) if v is None else v for k, v in defaults.items()}
    return ml_collections.ConfigDict(values, type_safe=False)


def _optional_types(cls) -> dict:
    """field -> its non-None type, for fields declared like `int | None`."""
    hints = typing.get_type_hints(cls)
    out = {}
    for name, hint in hints.items():
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        out[name] = args[0] if args and isinstance(args[0], type) else object
    return out


def default_config() -> ml_collections.ConfigDict:
    """Every key an experiment config may set, with its default; presets override some of them."""
    config = ml_collections.ConfigDict()
    config.model = _section(_model_defaults(), _optional_types(normjax.ModelConfig))
    config.data = ml_collections.ConfigDict(dataclasses.asdict(DataConfig()))
    config.train = ml_collections.ConfigDict(dataclasses.asdict(TrainConfig()))
    config.sweep = ml_collections.ConfigDict()
    config.sweep.axes = ml_collections.ConfigDict({}, allow_dotted_keys=True)
    config.sweep.vmap = False
    config.sweep.workers = 1  # runs trained side by side (0: one per CPU core; train.workers)
    config.sweep.parallel = "processes"  # spawned, one XLA thread each; or "threads" (one process)
    return config


def as_dict(config) -> dict:
    if isinstance(config, ml_collections.ConfigDict):
        return config.to_dict()
    return {k: dict(v) if isinstance(v, dict | types.MappingProxyType) else v for k, v in config.items()}


def did_you_mean(key: str, valid) -> str:
    """' (did you mean "x"?)' for the closest valid name, or ''."""
    close = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.6)
    return f' (did you mean "{close[0]}"?)' if close else ""


def _check_keys(section: str, values: dict, valid) -> None:
    unknown = sorted(set(values) - set(valid))
    if unknown:
        key = f"config.{section}.{unknown[0]}" if section else f"config.{unknown[0]}"
        raise ConfigError(f"unknown key {key}{did_you_mean(unknown[0], valid)}; valid keys: {', '.join(valid)}")


def _build(cls, section: str, values: dict):
    """cls(**values) after each field's Spec check (type, finite, range, choices)."""
    names = [f.name for f in dataclasses.fields(cls)]
    _check_keys(section, values, names)
    out = {}
    for field in dataclasses.fields(cls):
        key, value = f"config.{section}.{field.name}", values.get(field.name, field.default)
        try:
            out[field.name] = field.metadata["spec"].check(key, value)
        except ValueError as e:
            raise ConfigError(str(e)) from None
    return cls(**out)


def parse(config, num_devices: int = 1) -> RunConfig:
    """Validates a config (ConfigDict or nested dict) into a RunConfig; writes nothing.

    Raises:
      ConfigError: naming the offending key (and the valid choices or keys).
    """
    values = as_dict(config)
    _check_keys("", values, SECTIONS)
    data = _build(DataConfig, "data", values.get("data", {}))
    train = _build(TrainConfig, "train", values.get("train", {}))
    model = _model_defaults() | dict(values.get("model", {}))
    _check_keys("model", model, list(_model_defaults()))
    try:
        normjax.ModelConfig(**(model | {"vocab_size": model["vocab_size"] or 8, "max_len": model["max_len"] or 8}))
    except (ValueError, TypeError) as e:
        raise ConfigError(f"config.model: {e}") from None
    if model["arch"] != _TASK_ARCH[data.task]:
        raise ConfigError(
            f"config.model.arch={model['arch']!r} cannot train config.data.task="
            f"{data.task!r}; valid: {_TASK_ARCH[data.task]!r} (an encoder-only model "
            "is not trainable here)"
        )
    _check_data(data)
    if train.checkpoint_every % train.log_every:
        raise ConfigError(
            f"config.train.checkpoint_every={train.checkpoint_every} must be a multiple of "
            f"config.train.log_every={train.log_every} (so resumed logs match)"
        )
    if train.warmup_steps > train.num_steps:
        raise ConfigError(
            f"config.train.warmup_steps={train.warmup_steps} is longer than the run "
            f"(config.train.num_steps={train.num_steps})"
        )
    if train.max_tokens == 0 and train.batch_size % num_devices:
        raise ConfigError(f"config.train.batch_size={train.batch_size} is not divisible by the {num_devices} devices")
    if train.weight_decay > 0 and train.optimizer not in ("adamw", "sgd", "muon"):
        raise ConfigError(
            f"config.train.weight_decay={train.weight_decay} needs config.train.optimizer "
            f"'adamw', 'sgd' or 'muon', not {train.optimizer!r}"
        )
    _check_parametrization(train, model)
    return RunConfig(model=model, data=data, train=train)


def _check_parametrization(train: TrainConfig, model: dict) -> None:
    """CompleteP needs Adam / AdamW and the model's forward branch multiplier; base_width needs CompleteP."""
    key = "config.train.parametrization"
    if train.parametrization == "standard":
        if train.base_width:
            raise ConfigError(f"config.train.base_width={train.base_width} needs {key}='completep'")
        return
    if train.optimizer not in ("adam", "adamw"):
        raise ConfigError(f"{key}='completep' needs config.train.optimizer 'adam' or 'adamw', not {train.optimizer!r}")
    alpha = model["branch_multiplier_alpha"]
    if alpha is None or not 0.5 <= alpha <= 1.0:
        raise ConfigError(
            f"{key}='completep' needs config.model.branch_multiplier_alpha in [0.5, 1] (1.0 for CompleteP, "
            f"the forward half x + (L / L_base)^-alpha F(x), L_base = config.model.branch_multiplier_base_depth); "
            f"got {alpha!r}"
        )


def _check_data(data: DataConfig) -> None:
    if any(not isinstance(b, int) or not 2 <= b <= data.max_len for b in data.buckets):
        raise ConfigError(
            f"config.data.buckets={data.buckets!r}: each must be an int in [2, config.data.max_len={data.max_len}]"
        )
    if data.task == "iwslt14":
        missing = [f for f in IWSLT_FILES if not os.path.isfile(os.path.join(data.path, f))]
        missing = [f.replace("de", data.src_lang).replace("en", data.tgt_lang) for f in missing]
        if not data.path or missing:
            raise ConfigError(
                f"config.data.path={data.path!r} must be a folder with {', '.join(IWSLT_FILES)}"
                " (see scripts/prepare_iwslt14.sh)"
            )
    if data.task == "bytes_lm" and data.path and not os.path.isdir(data.path):
        raise ConfigError(f"config.data.path={data.path!r} is not a folder")
    if data.task == "gettext":
        from normjax.train.data_gettext import MANIFEST  # not at the top: see gettext_spec

        if data.src_lang == data.tgt_lang:
            raise ConfigError(f"config.data.src_lang and tgt_lang are both {data.src_lang!r}; give two languages")
        gettext_spec(data)
        if data.path and not os.path.isfile(os.path.join(data.path, MANIFEST)):
            raise ConfigError(
                f"config.data.path={data.path!r} must be a corpus folder with {MANIFEST} (python -m "
                "normjax.train.data_gettext --out=FOLDER), or empty to build one from this machine's catalogs"
            )
        if data.path and data.catalog_prefixes:
            raise ConfigError(
                f"config.data.catalog_prefixes={data.catalog_prefixes!r} builds a corpus, but config.data.path="
                f"{data.path!r} is one already built; give one of the two"
            )


def gettext_spec(data: DataConfig):
    """The data_gettext.CorpusSpec a run builds when config.data.path is empty (other settings: its defaults)."""
    # imported on use, so `python -m normjax.train.data_gettext` runs a module the package has not imported
    from normjax.train.data_gettext import CorpusSpec

    try:
        return CorpusSpec(
            data.src_lang,
            data.tgt_lang,
            data.catalog_prefixes,
            vocab_size=data.bpe_vocab_size,
            min_pairs=data.min_pairs,
        )
    except ValueError as e:
        raise ConfigError(f"config.data (gettext): {e}") from None


def sequence_length(data: DataConfig) -> int:
    """The longest padded sequence the model sees (sets model.max_len when it is 0)."""
    return data.seq_len if data.task == "bytes_lm" else data.max_len


def model_config(run: RunConfig, vocab_size: int) -> normjax.ModelConfig:
    """The ModelConfig of a run, with vocab_size / max_len filled from the data when 0."""
    fields = dict(run.model)
    if fields["vocab_size"] and fields["vocab_size"] < vocab_size:
        raise ConfigError(f"config.model.vocab_size={fields['vocab_size']} < the data's {vocab_size} tokens")
    if fields["max_len"] and fields["max_len"] < sequence_length(run.data):
        raise ConfigError(
            f"config.model.max_len={fields['max_len']} < config.data's sequence length {sequence_length(run.data)}"
        )
    fields["vocab_size"] = fields["vocab_size"] or vocab_size
    fields["max_len"] = fields["max_len"] or sequence_length(run.data)
    return normjax.ModelConfig(**fields)


def divergence_loss(train: TrainConfig, vocab_size: int) -> float:
    return train.divergence_loss or 1.5 * math.log(vocab_size)


def set_path(values: dict, dotted: str, value: Any) -> dict:
    """A copy of a nested config dict with `section.key` set; the key must exist."""
    section, _, key = dotted.partition(".")
    defaults = as_dict(default_config())
    if section not in SECTIONS[:3] or key not in defaults[section]:
        valid = [f"{s}.{k}" for s in SECTIONS[:3] for k in defaults[s]]
        raise ConfigError(f"unknown key config.{dotted}{did_you_mean(dotted, valid)}; valid keys: {', '.join(valid)}")
    out = {s: dict(v) for s, v in values.items()}
    out.setdefault(section, {})[key] = value
    return out


_UNSAFE = re.compile(r"[^A-Za-z0-9._=,+-]")


def path_component(text: str) -> str:
    """`text` as one folder name that stays inside its parent folder.

    Characters other than letters, digits and `._=,+-` become `_`, a leading `.` gets a `_` before it,
    and when anything changed (or the name is long) a hash of `text` keeps distinct texts apart.
    """
    safe = _UNSAFE.sub("_", text)
    safe = "_" + safe if safe.startswith(".") or not safe else safe
    if safe != text or len(safe) > 120:
        safe = f"{safe[:100]}-{hashlib.sha256(text.encode()).hexdigest()[:10]}"
    return safe


def sweep_axes(axes: dict) -> ml_collections.ConfigDict:
    """`config.sweep.axes` from {"section.key": [values, ...]} (dotted keys need this wrapper)."""
    return ml_collections.ConfigDict(dict(axes), allow_dotted_keys=True)
