"""Checking a study config before any compute: each key's type, range and choices (the study's `config.SCHEMA`),
then the cross-key rules every study shares and those of its own `config.check`."""

from __future__ import annotations

import normjax
from normjax import specs
from normjax.train.config_io import ConfigError, did_you_mean
from normjax.train.config_schema import Spec
from normjax.train.optimizers import OPTIMIZERS

POS = Spec(int, lo=1)  # sizes, counts, depths
SEED = Spec(int, lo=0)
POS_FLOAT = Spec(float, lo=0.0, lo_open=True)
SETTINGS = ("theory", "real")  # Xiong et al.'s analysis setting, the real model
DEPTHS = Spec(tuple, item=POS)
MODEL_SPECS = Spec(tuple, item=Spec(str))  # each parsed by `normjax.specs.parse` in check_specs
MODEL = dict(vocab_size=Spec(int, lo=2), d_model=POS, num_heads=POS, d_ff=POS)
# The keys of the studies that train byte LMs in-process (deep_training, trained_layers): data, optimizer, the
# divergence stop (normjax.train.TrainConfig's divergence_loss = factor * ln V after `patience` steps).
BYTE_LM_TRAINING = dict(
    max_bytes=POS,
    data_seed=SEED,
    optimizer=Spec(str, choices=OPTIMIZERS),
    b1=Spec(float, lo=0.0, hi=1.0),
    b2=Spec(float, lo=0.0, hi=1.0),
    eps=POS_FLOAT,
    divergence_factor=POS_FLOAT,
    divergence_patience=POS,
    divergence_check_every=POS,
)


def choices(*names: str) -> Spec:
    """A non-empty tuple of names from `names`."""
    return Spec(tuple, item=Spec(str, choices=names))


PLACEMENTS = choices(*normjax.PLACEMENTS)


def check_unknown(prefix: str, values: dict, valid) -> None:
    for key in values:
        if key not in valid:
            raise ConfigError(f"unknown key {prefix}.{key}{did_you_mean(key, valid)}; valid keys: {', '.join(valid)}")


def _check_section(prefix: str, values: dict, schema: dict) -> None:
    check_unknown(prefix, values, schema)
    for key, spec in schema.items():
        if key not in values:
            raise ConfigError(f"{prefix}.{key} is missing from the config file")
        if isinstance(spec, dict):
            if not isinstance(values[key], dict):
                raise ConfigError(f"{prefix}.{key}={values[key]!r} must be a section with keys {', '.join(spec)}")
            _check_section(f"{prefix}.{key}", values[key], spec)
        elif spec is not None:
            try:
                spec.check(f"{prefix}.{key}", values[key])
            except ValueError as e:
                raise ConfigError(str(e)) from None


def model(values: dict, **fields) -> normjax.ModelConfig:
    """A ModelConfig of the study's sizes (raises ConfigError naming the field)."""
    sizes = {k: values[k] for k in ("vocab_size", "d_model", "num_heads", "d_ff") if k in values}
    try:
        return normjax.ModelConfig(**(sizes | fields))
    except (TypeError, ValueError) as e:
        raise ConfigError(f"config: {e}") from None


def check_specs(name: str, values: dict, keys: tuple[str, ...], model_fields: list[dict], refuse=None) -> None:
    """Every model spec under `keys` parses (`normjax.specs`) and builds with at least one of `model_fields`
    (the study's architectures or settings: the others are left out of its results, visibly, e.g. nGPT has no
    encoder-decoder); `refuse(spec, values)` returns why the study cannot measure a spec it would build.

    Raises:
      ConfigError: one line naming the key, the entry and why not.
    """
    for key in keys:
        for i, text in enumerate(values[key]):
            try:
                spec = specs.parse(text)
            except ValueError as e:
                raise ConfigError(f"config.{key}[{i}]={text!r} is invalid: {e}") from None
            why = refuse(spec, values) if refuse else None
            if why:
                raise ConfigError(f"config.{key}[{i}]={text!r} is invalid here: {why}")
            errors = []
            for fields in model_fields:
                try:
                    normjax.ModelConfig(**(fields | spec.fields))
                except (TypeError, ValueError) as e:
                    errors.append(e)
            if errors and len(errors) == len(model_fields):
                raise ConfigError(f"config.{key}[{i}]={text!r} cannot be measured by {name}: {errors[0]}") from None


def check_sizes(values: dict) -> None:
    """The study's model sizes build (and in the theory setting with one head)."""
    model(values, num_layers=1, placement="pre", max_len=max(values.get("seq_len", 8), 8))
    if "theory" in values.get("settings", ()):
        model(values | {"num_heads": 1}, num_layers=1, placement="pre", theory=True)


def check_fit_depths(name: str, values: dict) -> None:
    """At least two distinct depths: the study fits a growth exponent over depth."""
    if len(set(values["depths"])) < 2:
        raise ConfigError(
            f"config.depths={tuple(values['depths'])!r} needs at least 2 distinct depths: {name} fits a growth "
            "exponent over depth"
        )


def validate(study, config) -> None:
    """Checks a study's config: every key known and valid (`study.config.SCHEMA`), then the study's cross-key
    rules (`study.config.check(values)`, else the model sizes), before any compute.

    Raises:
      ConfigError: one line naming the key, the value and what is valid.
    """
    values = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    _check_section("config", values, study.config.SCHEMA)
    check = getattr(study.config, "check", check_sizes)
    check(values)


def largest_model(study, values: dict) -> tuple[normjax.ModelConfig, int, int]:
    """(model, rows, seq_len) of the study's largest model and batch (the memory check): the study's own
    `config.largest_model(values)`, else a Pre-LN decoder of its sizes at its deepest depth."""
    if hasattr(study.config, "largest_model"):
        return study.config.largest_model(values)
    seq_len = values.get("seq_len", 8)
    depth = max(tuple(values.get("depths", ())) + (values.get("num_layers", 1),))
    cfg = model(values, arch="decoder", num_layers=depth, placement="pre", max_len=max(seq_len, 8))
    return cfg, values.get("batch_size", 1), seq_len
