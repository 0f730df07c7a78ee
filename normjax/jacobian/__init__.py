"""Jacobians of pure JAX functions: exact, matrix-free spectra, closed-form norm Jacobians, fits."""

from normjax.jacobian import pure
from normjax.jacobian.exact import jacobian, token_blocks
from normjax.jacobian.fits import (
    LinearFit,
    LogFit,
    PowerLawFit,
    linear_fit,
    log_fit,
    power_law_fit,
)
from normjax.jacobian.norm_jacobians import (
    ClosedFormNorm,
    dyt_jacobian,
    dyt_jacobian_norm,
    layernorm_jacobian,
    layernorm_jacobian_norm,
    layernorm_sigma,
    norm_jacobian,
    norm_jacobian_norm,
    rmsnorm_jacobian,
    rmsnorm_jacobian_norm,
    rmsnorm_rms,
)
from normjax.jacobian.spectral import (
    AUTO_EXACT_MAX_ENTRIES,
    FrobeniusInfo,
    SpectralInfo,
    frobenius_norm_sq,
    singular_values,
    spectral_norm,
)
from normjax.jacobian.traced import evaluate, with_call

differentiable_spectral_norm = pure.differentiable_spectral_norm

__all__ = [
    "AUTO_EXACT_MAX_ENTRIES",
    "ClosedFormNorm",
    "FrobeniusInfo",
    "LinearFit",
    "LogFit",
    "PowerLawFit",
    "SpectralInfo",
    "differentiable_spectral_norm",
    "dyt_jacobian",
    "dyt_jacobian_norm",
    "evaluate",
    "frobenius_norm_sq",
    "jacobian",
    "layernorm_jacobian",
    "layernorm_jacobian_norm",
    "layernorm_sigma",
    "linear_fit",
    "log_fit",
    "norm_jacobian",
    "norm_jacobian_norm",
    "power_law_fit",
    "pure",
    "rmsnorm_jacobian",
    "rmsnorm_jacobian_norm",
    "rmsnorm_rms",
    "singular_values",
    "spectral_norm",
    "token_blocks",
    "with_call",
]
