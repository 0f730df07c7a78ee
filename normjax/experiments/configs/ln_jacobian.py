"""ln_jacobian presets.

python -m experiments.ln_jacobian --config=experiments/configs/ln_jacobian.py:quick
"""

from normjax.experiments.configs import hidden_norms, preset


def _base():
    c = hidden_norms.get_config("quick")  # the same models as hidden_norms, so the two studies line up
    c.placements = ("post", "pre", "sandwich", "deepnorm")
    c.num_check_tokens = 4  # per norm site, for the autodiff checks (seed 0)
    c.gamma_noise = 0.3  # gamma = 1 + 0.3 N(0, 1) for the non-constant-gamma check
    return c


def _paper():
    c = _base()
    c.placements = ("post", "pre", "sandwich", "deepnorm", "admin")
    c.d_model, c.num_heads, c.d_ff, c.num_layers = 512, 8, 2048, 48
    c.batch_size, c.seq_len, c.num_seeds = 16, 64, 5
    return c


def get_config(arg: str = "quick"):
    return preset(arg, {"quick": _base, "paper": _paper})
