"""jacobian_spectrum presets: quick (CPU, about a minute), standard (CPU, the committed report), paper.

python -m normjax.studies.jacobian_spectrum --config=:quick --workdir=results
"""

import ml_collections

import normjax
from normjax.studies import schema as s
from normjax.studies.presets import INIT_TIME_SPECS, preset
from normjax.train.config_schema import Spec

# The :paper list: not hybrid_star (its q/k/v norms sit inside the sublayer map the study differentiates),
# the MULTI_STREAM placements (more than one residual stream: measured exactly, but the matrix-free products
# that n = 8192 needs take one), b2t (its FFN sublayer reads the block input).
MULTI_STREAM = ("resi_dual", "siamese", "shc", "mhc", "mhc_lite")
PAPER_SPECS = tuple(s for s in INIT_TIME_SPECS if s not in ("hybrid_star", "b2t", *MULTI_STREAM))


def _quick():
    c = ml_collections.ConfigDict()
    c.placements = ("post", "pre", "rezero", "deepnorm", "lns")  # R1, R2, S3, S7 need post, pre, rezero; N1 lns
    c.stream_placements = ("shc", "mhc")  # N2: the composite residual mapping prod_l H_res (streams.py)
    c.depths = (4, 12, 24)  # each product's SVD costs: L = 64 alone took 12 s of CPU per model
    c.vocab_size = 256
    c.d_model, c.num_heads, c.d_ff = 32, 4, 128
    c.seq_len = 8  # one sequence: the Jacobians are (seq_len * d_model) square
    c.seed, c.num_seeds = 0, 3  # seeds seed .. seed + num_seeds - 1: verdicts from their mean and 95% interval
    c.exact_max_n = 4096  # exact spectra (all singular values) up to this n, matrix-free top-k above
    c.top_k = 32
    c.resolution = 1e-12  # singular values below this times the largest are beyond float64's reach
    return c


def _standard():
    c = _quick()
    c.placements = ("post", "pre", "rezero", "deepnorm", "admin", "resi_dual", "lns")  # resi_dual: the pair (x, d)
    c.stream_placements = ("shc", "dhc", "mhc")
    c.depths = (4, 12, 32, 64)
    c.num_seeds = 5
    return c


def _paper():
    c = _quick()
    c.d_model, c.num_heads, c.d_ff, c.seq_len = 512, 8, 2048, 16  # n = 8192: matrix-free
    c.num_seeds = 5
    c.placements = PAPER_SPECS
    return c


def get_config(arg: str = "quick"):
    return preset(arg, {"quick": _quick, "standard": _standard, "paper": _paper})


SCHEMA = s.MODEL | dict(
    placements=s.MODEL_SPECS,
    stream_placements=Spec(tuple, item=Spec(str, choices=normjax.hyper.HYPER_KINDS), nonempty=False),
    depths=s.DEPTHS,
    seq_len=s.POS,
    seed=s.SEED,
    num_seeds=s.POS,
    exact_max_n=s.POS,
    top_k=s.POS,
    resolution=Spec(float, lo=0.0, hi=1.0, lo_open=True),
)


def _refuse(spec, values: dict) -> str | None:
    """A multi-stream placement beyond the exact size (the matrix-free products take one residual stream); the
    speedrun's skips anywhere."""
    if {"value_residual", "x0_lambdas"} & {k for k, v in spec.fields.items() if v is True}:
        return (
            f"{spec.text}: the speedrun's value residual / x0 lambdas carry x_0 and v_1 beside the stream (v_1 starts "
            "at 0, not x_0), which jacobian_spectrum's products and input-output Jacobian do not model"
        )
    matrix_free = values["seq_len"] * values["d_model"] > values["exact_max_n"]
    kind = normjax.registry.get(spec.placement).stream_kind
    if kind != "one" and matrix_free:
        streams = "two residual streams (x, d)" if kind == "dual" else "n hyper-connection residual streams"
        return (
            f"{spec.placement} carries {streams}, which jacobian_spectrum measures exactly (seq_len * d_model <= "
            "exact_max_n) but not with its matrix-free methods, which take one stream (see docs/placements.md)"
        )
    return None


def check(values: dict) -> None:
    """Every placement spec parses and is measurable; the sizes build."""
    s.check_specs("jacobian_spectrum", values, ("placements",), [], refuse=_refuse)
    s.check_sizes(values)
