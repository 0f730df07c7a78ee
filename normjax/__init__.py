"""normjax: where should normalization sit in a residual Transformer block, measured in JAX/Flax NNX."""

__version__ = "0.1.0"  # the package version (pyproject.toml reads it from here)

import normjax.blas_threads  # noqa: F401 (first: one OpenBLAS thread in `python -m normjax.<main>`)
from normjax import jacobian, registry
from normjax.blocks import Block, BlockContext
from normjax.config import NORMS, PLACEMENTS, ModelConfig
from normjax.host_memory import keep_freed_memory
from normjax.hyper import HyperStreams
from normjax.init import (
    admin_omega,
    deepnorm_constants,
    gpt2_scale,
    subln_gain,
    tfixup_embedding_scale,
    tfixup_scale,
)
from normjax.model import Transformer, check_token_ids
from normjax.norms import make_norm
from normjax.placements import DualStream
from normjax.probing import (
    StackProbes,
    block_context,
    block_fn,
    embed,
    layer_params,
    num_blocks,
    probe,
    probe_stream,
    profile_admin,
    stack_fn,
    stack_names,
    sublayer_fn,
)
from normjax.skips import SkipStream

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
