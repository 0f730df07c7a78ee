"""The encoder hidden_norms and ln_jacobian measure (theory setting or real model) and Lemma 2's bounds."""

from __future__ import annotations

import numpy as np

import normjax
from normjax import specs


def model_config(config, setting: str, placement: str, num_layers=None, scan_layers=False) -> normjax.ModelConfig:
    """The encoder of this study: Xiong et al.'s theory setting or the real (multi-head) model.

    `placement` is a model spec (`normjax.specs`: "pre", "pre+qk_norm", "pre:scalenorm"); `num_layers` defaults to
    config.num_layers; `scan_layers` compiles one layer for every depth (depth_scaling's sweep over L).
    """
    theory = setting == "theory"
    return normjax.ModelConfig(
        arch="encoder",
        vocab_size=config.vocab_size,
        d_model=config.d_model,
        num_heads=1 if theory else config.num_heads,
        d_ff=config.d_ff,
        num_layers=config.num_layers if num_layers is None else num_layers,
        theory=theory,
        scan_layers=scan_layers,
        max_len=max(config.seq_len, 8),
        **specs.parse(placement).fields,
    )


def lemma2_bounds(num_layers: int) -> dict:
    """Xiong et al. Lemma 2 for Pre-LN: (1 + l/2) <= E||x_l||^2/d <= (1 + 3l/2); Post-LN input 3/2."""
    l = np.arange(num_layers + 1)
    return {"pre_lower": 1 + l / 2, "pre_upper": 1 + 3 * l / 2, "post_ln_input": 1.5}
