"""Probes of normjax models built on the Jacobian core: norm sites and streams (model_probes), parameter gradients
and output changes (param_probes), per-block and end-to-end Jacobians (model_jacobians); the stream and Jacobian
probes of any model given as a list of block functions (foreign); attention sinks and outliers (sinks); per-layer
Jacobians averaged over data (jacobian_lens) and their file (lens_file); per-layer update norms and Adam's second
moment while training (update_probes), loss-spike detection and replay of the steps before a spike (spike_replay)."""

from normjax.probes import (
    foreign,
    jacobian_lens,
    lens_file,
    model_jacobians,
    model_probes,
    param_probes,
    sinks,
    spike_replay,
    update_probes,
)

__all__ = [
    "foreign",
    "jacobian_lens",
    "lens_file",
    "model_jacobians",
    "model_probes",
    "param_probes",
    "sinks",
    "spike_replay",
    "update_probes",
]
