"""Every study config key's type, range and choices, and the cross-key rules, checked before any compute."""

from __future__ import annotations

import dataclasses

import normjax
from normjax import specs
from normjax.jacobian.spectral import METHODS
from normjax.studies import diagnose_probe
from normjax.train.config_io import ConfigError, did_you_mean
from normjax.train.config_schema import Spec
from normjax.train.data_text import byte_vocab
from normjax.train.optimizers import OPTIMIZERS

POS = Spec(int, lo=1)  # sizes, counts, depths
SEED = Spec(int, lo=0)
POS_FLOAT = Spec(float, lo=0.0, lo_open=True)
SETTINGS = ("theory", "real")  # Xiong et al.'s analysis setting, the real model


def choices(*names: str) -> Spec:
    """A non-empty tuple of names from `names`."""
    return Spec(tuple, item=Spec(str, choices=names))


PLACEMENTS = choices(*normjax.PLACEMENTS)
MODEL_SPECS = Spec(tuple, item=Spec(str))  # each parsed by `normjax.specs.parse` in the cross-key checks
SPEC_KEYS = {  # the studies whose model lists take `normjax.specs` specs ("pre+qk_norm", "pre:scalenorm")
    "deep_training": ("runs", "side_runs"),
    "grad_norms_at_init": ("placements",),
    "hidden_norms": ("placements",),
    "jacobian_spectrum": ("placements",),
}
DEPTHS = Spec(tuple, item=POS)
_MODEL = dict(vocab_size=Spec(int, lo=2), d_model=POS, num_heads=POS, d_ff=POS)

SCHEMAS: dict[str, dict] = {
    "amplification": _MODEL
    | dict(
        placements=choices(*normjax.PLACEMENTS, "admin_profiled"),
        depths=DEPTHS,
        batch_size=POS,
        seq_len=POS,
        seed=SEED,
        num_seeds=POS,
        kinds=choices("random", "grad_sign"),
        eps=dict(random=POS_FLOAT, grad_sign=POS_FLOAT),
        scopes=choices("branch", "all"),
    ),
    "cost": _MODEL
    | dict(
        placements=PLACEMENTS,
        reference=Spec(str, choices=normjax.PLACEMENTS),
        num_layers=POS,
        batch_size=POS,
        seq_len=POS,
        warmup_steps=SEED,
        repeats=POS,
        inner_steps=POS,
        seed=SEED,
        num_seeds=POS,
    ),
    "deep_training": dict(
        runs=MODEL_SPECS,
        depths=DEPTHS,
        side_runs=Spec(tuple, item=Spec(str), nonempty=False),
        side_depths=Spec(tuple, item=POS, nonempty=False),
        d_model=POS,
        num_heads=POS,
        d_ff=POS,
        seq_len=POS,
        batch_size=POS,
        max_bytes=POS,
        data_seed=SEED,
        lr=POS_FLOAT,
        num_steps=POS,
        optimizer=Spec(str, choices=OPTIMIZERS),
        b1=Spec(float, lo=0.0, hi=1.0),
        b2=Spec(float, lo=0.0, hi=1.0),
        eps=POS_FLOAT,
        early_steps=POS,
        update_lr=POS_FLOAT,
        probe_every=POS,
        final_window=POS,
        divergence_factor=POS_FLOAT,
        divergence_patience=POS,
        divergence_check_every=POS,
        s7_depths=Spec(tuple, item=POS, nonempty=False),  # () skips S7
        s7_lrs=Spec(tuple, item=POS_FLOAT),
        s7_warmup=SEED,
        s7_steps=POS,
        s7_schedule=Spec(str, choices=("constant", "inverse_sqrt")),  # linear warmup, then lr or lr sqrt(w/t)
        seed=SEED,
        num_seeds=POS,
    ),
    "depth_scaling": _MODEL
    | dict(
        placements=PLACEMENTS,
        settings=choices(*SETTINGS),
        depths=DEPTHS,
        batch_size=POS,
        seq_len=POS,
        num_batches=POS,
        seed=SEED,
        num_seeds=POS,
    ),
    "diagnose": dict(
        model=None,  # every ModelConfig field: checked by ModelConfig itself
        batch_size=POS,
        seq_len=POS,
        num_batches=POS,
        seed=SEED,
        jacobian_method=Spec(str, choices=METHODS),
        jacobian_seq_len=POS,
        thresholds=dict(
            grad_ratio=POS_FLOAT,
            stream_growth=POS_FLOAT,
            ln_jacobian=POS_FLOAT,
            block_norm=POS_FLOAT,
            update=POS_FLOAT,
            ln_growth=POS_FLOAT,
            grad_collapse=POS_FLOAT,
        ),
        probe_steps=SEED,  # 0 = no probe training
        data=None,  # experiments.train's sections: checked by normjax.train.parse (diagnose_probe.run_config)
        train=None,
    ),
    "grad_norms_at_init": _MODEL
    | dict(
        archs=choices("encoder_decoder", "encoder", "decoder"),
        placements=MODEL_SPECS,
        num_layers=POS,
        batch_size=POS,
        seq_len=POS,
        num_batches=POS,
        seed=SEED,
        num_seeds=POS,
    ),
    "hidden_norms": _MODEL
    | dict(
        placements=MODEL_SPECS,
        settings=choices(*SETTINGS),
        num_layers=POS,
        batch_size=POS,
        seq_len=POS,
        seed=SEED,
        num_seeds=POS,
    ),
    "jacobian_spectrum": _MODEL
    | dict(
        placements=MODEL_SPECS,
        depths=DEPTHS,
        seq_len=POS,
        seed=SEED,
        num_seeds=POS,
        exact_max_n=POS,
        top_k=POS,
        resolution=Spec(float, lo=0.0, hi=1.0, lo_open=True),
    ),
}
SCHEMAS["ln_jacobian"] = _MODEL | dict(  # its own keys: hidden_norms' sizes, not its schema
    placements=PLACEMENTS,
    settings=choices(*SETTINGS),
    num_layers=POS,
    batch_size=POS,
    seq_len=POS,
    seed=SEED,
    num_seeds=POS,
    num_check_tokens=POS,
    gamma_noise=Spec(float, lo=0.0),
)


def _check_unknown(prefix: str, values: dict, valid) -> None:
    for key in values:
        if key not in valid:
            raise ConfigError(f"unknown key {prefix}.{key}{did_you_mean(key, valid)}; valid keys: {', '.join(valid)}")


def _check_section(prefix: str, values: dict, schema: dict) -> None:
    _check_unknown(prefix, values, schema)
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


def _model(values: dict, **fields) -> normjax.ModelConfig:
    """A ModelConfig of the study's sizes (raises ConfigError naming the field)."""
    sizes = {k: values[k] for k in ("vocab_size", "d_model", "num_heads", "d_ff") if k in values}
    try:
        return normjax.ModelConfig(**(sizes | fields))
    except (TypeError, ValueError) as e:
        raise ConfigError(f"config: {e}") from None


def _check_specs(name: str, values: dict) -> None:
    """Every model spec of the study parses (`normjax.specs`): one line naming the key, the entry and why not.

    jacobian_spectrum refuses ResiDual beyond its exact size: the matrix-free products take one residual stream.
    """
    for key in SPEC_KEYS.get(name, ()):
        for i, text in enumerate(values[key]):
            try:
                spec = specs.parse(text)
            except ValueError as e:
                raise ConfigError(f"config.{key}[{i}]={text!r} is invalid: {e}") from None
            matrix_free = values.get("seq_len", 0) * values.get("d_model", 0) > values.get("exact_max_n", 0)
            if name == "jacobian_spectrum" and normjax.registry.get(spec.placement).dual_stream and matrix_free:
                raise ConfigError(
                    f"config.{key}[{i}]={text!r} is invalid here: {spec.placement} carries two residual streams, "
                    "which jacobian_spectrum measures exactly (seq_len * d_model <= exact_max_n) but not with its "
                    "matrix-free methods (see docs/placements.md)"
                )
            _check_buildable(name, key, i, text, spec, values)


def _study_model_fields(name: str, values: dict) -> list[dict]:
    """The ModelConfig fields (besides the spec's) of the models a study would build for every spec: one per
    architecture of grad_norms_at_init, one per setting of hidden_norms (real: the study's own config)."""
    if name == "grad_norms_at_init":
        return [{"arch": arch} for arch in values["archs"]]
    if name == "hidden_norms":
        theory = {"arch": "encoder", "num_heads": 1, "theory": True}
        return [theory if setting == "theory" else {"arch": "encoder"} for setting in values["settings"]]
    return []


def _check_buildable(name: str, key: str, i: int, text: str, spec, values: dict) -> None:
    """A spec the study can build in at least one of its architectures or settings (the others are left out of
    the results, visibly, e.g. nGPT: no encoder-decoder, no theory setting); in none is an error.

    Raises:
      ConfigError: naming the entry and why the first architecture or setting refused it.
    """
    errors = []
    for fields in _study_model_fields(name, values):
        try:
            normjax.ModelConfig(**(fields | spec.fields))
        except (TypeError, ValueError) as e:
            errors.append(e)
    if errors and len(errors) == len(_study_model_fields(name, values)):
        raise ConfigError(f"config.{key}[{i}]={text!r} cannot be measured by {name}: {errors[0]}") from None


def _cross_checks(name: str, values: dict) -> None:
    """Rules between keys (model sizes, lengths, windows); the per-key rules come first."""
    if name == "diagnose":
        fields = [f.name for f in dataclasses.fields(normjax.ModelConfig)]
        _check_unknown("config.model", values["model"], fields)  # missing fields take ModelConfig's defaults
        try:
            cfg = normjax.ModelConfig(**values["model"])
        except (TypeError, ValueError) as e:
            raise ConfigError(f"config.model: {e}") from None
        if values["seq_len"] > cfg.max_len:
            raise ConfigError(f"config.seq_len={values['seq_len']} is longer than config.model.max_len={cfg.max_len}")
        if values["jacobian_seq_len"] > values["seq_len"]:
            raise ConfigError(
                f"config.jacobian_seq_len={values['jacobian_seq_len']} is longer than "
                f"config.seq_len={values['seq_len']}"
            )
        probe_run = diagnose_probe.run_config(values)  # the probe's run: ConfigError naming the key
        if values["probe_steps"] > probe_run.train.num_steps:
            raise ConfigError(
                f"config.probe_steps={values['probe_steps']} is longer than the run "
                f"(config.train.num_steps={probe_run.train.num_steps})"
            )
        return
    _check_specs(name, values)
    if name == "deep_training":
        for key, steps in (("early_steps", "num_steps"), ("final_window", "num_steps"), ("final_window", "s7_steps")):
            if values[key] > values[steps]:
                raise ConfigError(f"config.{key}={values[key]} is longer than the run (config.{steps}={values[steps]})")
        if values["s7_warmup"] >= values["s7_steps"]:
            raise ConfigError(
                f"config.s7_warmup={values['s7_warmup']} leaves no step at the peak lr (config.s7_steps="
                f"{values['s7_steps']})"
            )
    _model(values, num_layers=1, placement="pre", max_len=max(values.get("seq_len", 8), 8))
    if name in ("amplification", "depth_scaling") and len(set(values["depths"])) < 2:
        raise ConfigError(
            f"config.depths={tuple(values['depths'])!r} needs at least 2 distinct depths: {name} fits a growth "
            "exponent over depth"
        )
    if name == "cost" and values["reference"] not in values["placements"]:
        raise ConfigError(f"config.reference={values['reference']!r} must be one of config.placements")
    if "theory" in values.get("settings", ()):
        _model(values | {"num_heads": 1}, num_layers=1, placement="pre", theory=True)
    if name == "hidden_norms" and tuple(values["settings"]) == ("theory",):  # the theory setting skips these
        theory = [
            _model(values | {"num_heads": 1}, arch="encoder", theory=True, **specs.parse(p).fields)
            for p in values["placements"]
        ]
        if all(cfg.has_embedding_norm("encoder") for cfg in theory):
            raise ConfigError(
                f"config.placements={tuple(values['placements'])!r} all normalise the embeddings, which the theory "
                "setting (config.settings) bypasses: nothing would be measured; add 'real' or another placement"
            )


def validate(name: str, config) -> None:
    """Checks a study's config: every key known and valid, every cross-key rule (before any compute).

    Raises:
      ConfigError: one line naming the key, the value and what is valid.
    """
    values = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    _check_section("config", values, SCHEMAS[name])
    _cross_checks(name, values)


def largest_model(name: str, values: dict) -> tuple[normjax.ModelConfig, int, int]:
    """(model, rows, seq_len) of the study's largest model and batch (for the memory check)."""
    seq_len = values.get("seq_len", 8)
    if name == "diagnose":
        return normjax.ModelConfig(**values["model"]), values["batch_size"], seq_len
    depths = tuple(values.get("depths", ())) + tuple(values.get("side_depths", ())) + (values.get("num_layers", 1),)
    depths += tuple(values.get("s7_depths", ()))  # deep_training's S7 runs
    vocab = {"vocab_size": len(byte_vocab())}  # deep_training's byte LM
    cfg = _model(vocab | values, arch="decoder", num_layers=max(depths), placement="pre", max_len=max(seq_len, 8))
    return cfg, values.get("batch_size", 1), seq_len
