"""amplification presets: quick (CPU, about a minute), standard (the committed report), paper (accelerators).

python -m normjax.studies.amplification --config=:quick --workdir=results
"""

import ml_collections

import normjax
from normjax.studies import schema as s
from normjax.studies.presets import preset


def _quick():
    c = ml_collections.ConfigDict()
    c.placements = ("post", "pre", "admin", "admin_profiled")
    c.depths = (2, 4, 8, 16)  # layers; N = 2 L residual sublayers
    c.vocab_size = 256
    c.d_model, c.num_heads, c.d_ff = 32, 4, 128
    c.batch_size, c.seq_len = 4, 16
    c.seed = 0
    c.num_seeds = 8  # seeds cost no compile; Post-LN's output change is heavy-tailed over seeds
    # grad_sign (Adam's first step, -eps sign(grad)) is the update L1 is judged on; random (eps |W| N(0, 1)) is
    # reported beside it. The gradient compiles once per model layout, so the quick preset keeps few layouts.
    c.kinds = ("grad_sign", "random")
    # random: relative noise scale; grad_sign: Adam's step size, small enough for the linear regime at the deepest
    # model (Post-LN, L = 32: doubling eps to 2e-5 doubles rms dF within 5%; at 1e-4 only x1.67)
    c.eps = {"random": 1e-2, "grad_sign": 1e-5}
    c.scopes = ("branch", "all")  # the verdict uses the first: Liu et al. perturb the sublayer weights W_i
    return c


def _standard():
    c = _quick()
    c.placements = ("post", "pre", "admin", "admin_profiled", "deepnorm")
    c.depths = (2, 4, 8, 16, 32)
    c.num_seeds = 16
    return c


def _paper():
    c = _standard()
    c.depths = (3, 6, 12, 18, 36, 50, 100)
    c.d_model, c.num_heads, c.d_ff = 512, 8, 2048
    c.batch_size, c.seq_len, c.num_seeds = 16, 64, 5
    c.eps = {"random": 1e-2, "grad_sign": 1e-6}  # deeper models leave the linear regime at smaller steps
    return c


def get_config(arg: str = "quick"):
    return preset(arg, {"quick": _quick, "standard": _standard, "paper": _paper})


SCHEMA = s.MODEL | dict(
    placements=s.choices(*normjax.PLACEMENTS, "admin_profiled"),
    depths=s.DEPTHS,
    batch_size=s.POS,
    seq_len=s.POS,
    seed=s.SEED,
    num_seeds=s.POS,
    kinds=s.choices("random", "grad_sign"),
    eps=dict(random=s.POS_FLOAT, grad_sign=s.POS_FLOAT),
    scopes=s.choices("branch", "all"),
)


def check(values: dict) -> None:
    """The sizes build; at least two depths to fit the growth exponent."""
    s.check_sizes(values)
    s.check_fit_depths("amplification", values)
