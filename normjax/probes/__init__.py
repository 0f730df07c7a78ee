"""Probes of normjax models built on the Jacobian core: norm sites and streams (model_probes), parameter gradients
and output changes (param_probes), per-block and end-to-end Jacobians (model_jacobians); the stream and Jacobian
probes of any model given as a list of block functions (foreign); attention sinks and outliers (sinks)."""

from normjax.probes import foreign, model_jacobians, model_probes, param_probes, sinks

__all__ = ["foreign", "model_jacobians", "model_probes", "param_probes", "sinks"]
