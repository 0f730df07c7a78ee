"""amplification presets.

python -m experiments.amplification --config=experiments/configs/amplification.py:quick --workdir=results
"""

import ml_collections

from normjax.experiments.configs import preset


def _base():
    c = ml_collections.ConfigDict()
    c.placements = ("post", "pre", "admin", "admin_profiled", "deepnorm")
    c.depths = (2, 4, 8, 16, 32)  # layers; N = 2 L residual sublayers
    c.vocab_size = 256
    c.d_model, c.num_heads, c.d_ff = 32, 4, 128
    c.batch_size, c.seq_len = 4, 16
    c.num_seeds = 16  # Post-LN's output change is heavy-tailed over seeds; seeds cost no compile
    c.kinds = ("random",)  # paper adds "grad_sign"; its gradient compiles for ~6 s per model layout on CPU
    c.eps = {"random": 1e-2, "grad_sign": 1e-4}  # relative noise scale; Adam-like step size (small: linear regime)
    c.scopes = ("branch", "all")  # the verdict uses the first: Liu et al. perturb the sublayer weights W_i
    return c


def _paper():
    c = _base()
    c.depths = (3, 6, 12, 18, 36, 50, 100)
    c.d_model, c.num_heads, c.d_ff = 512, 8, 2048
    c.batch_size, c.seq_len, c.num_seeds = 16, 64, 5
    c.kinds = ("random", "grad_sign")
    return c


def get_config(arg: str = "quick"):
    return preset(arg, {"quick": _base, "paper": _paper})
