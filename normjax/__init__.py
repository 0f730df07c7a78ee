"""normjax: where should normalization sit in a residual Transformer block, measured in JAX/Flax NNX."""

__version__ = "0.1.0"  # the package version (pyproject.toml reads it from here)

import importlib

import normjax.blas_threads  # noqa: F401 (first: one OpenBLAS thread in `python -m normjax.<main>`)

# Everything else loads on first use (PEP 562), so `import normjax.jacobian` loads jax and numpy, not flax, optax
# or the models: {public name: the module that defines it}; subpackages by their own name.
_SUBMODULES = ("jacobian", "registry")
_LAZY = {
    "Block": "normjax.blocks",
    "BlockContext": "normjax.blocks",
    "NORMS": "normjax.config",
    "PLACEMENTS": "normjax.config",
    "ModelConfig": "normjax.config",
    "keep_freed_memory": "normjax.host_memory",
    "HyperStreams": "normjax.hyper",
    "admin_omega": "normjax.init",
    "deepnorm_constants": "normjax.init",
    "gpt2_scale": "normjax.init",
    "subln_gain": "normjax.init",
    "tfixup_embedding_scale": "normjax.init",
    "tfixup_scale": "normjax.init",
    "Transformer": "normjax.model",
    "check_token_ids": "normjax.model",
    "make_norm": "normjax.norms",
    "DualStream": "normjax.placements",
    "SkipStream": "normjax.skips",
    **{
        name: "normjax.probing"
        for name in (
            "StackProbes",
            "block_context",
            "block_fn",
            "embed",
            "layer_params",
            "num_blocks",
            "probe",
            "probe_stream",
            "profile_admin",
            "stack_fn",
            "stack_names",
            "sublayer_fn",
        )
    },
}


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f"normjax.{name}")
    if name not in _LAZY:
        raise AttributeError(f"module 'normjax' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "NORMS",
    "__version__",
    "PLACEMENTS",
    "Block",
    "BlockContext",
    "DualStream",
    "HyperStreams",
    "ModelConfig",
    "SkipStream",
    "StackProbes",
    "Transformer",
    "admin_omega",
    "block_context",
    "block_fn",
    "check_token_ids",
    "deepnorm_constants",
    "embed",
    "gpt2_scale",
    "jacobian",
    "keep_freed_memory",
    "layer_params",
    "make_norm",
    "num_blocks",
    "probe",
    "probe_stream",
    "profile_admin",
    "registry",
    "stack_fn",
    "stack_names",
    "sublayer_fn",
    "subln_gain",
    "tfixup_embedding_scale",
    "tfixup_scale",
]
