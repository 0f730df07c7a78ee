"""Probes of normjax models built on the Jacobian core: norm sites and streams (model_probes), parameter gradients
and output changes (param_probes), per-block and end-to-end Jacobians (model_jacobians)."""

from normjax.probes import model_jacobians, model_probes, param_probes

__all__ = ["model_jacobians", "model_probes", "param_probes"]
