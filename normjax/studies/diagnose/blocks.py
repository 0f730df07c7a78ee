"""diagnose on any model given as block functions: the table's stream and block Jacobian columns, and warnings."""

from collections.abc import Callable, Sequence

import numpy as np

from normjax.io import to_jsonable
from normjax.probes import foreign
from normjax.studies.diagnose import config as diagnose_config
from normjax.studies.diagnose import table


def diagnose_blocks(
    blocks: Sequence[Callable],
    x,
    params: Sequence | None = None,
    *,
    name: str = "model",
    method: str = "auto",
    thresholds: dict | None = None,
) -> dict:
    """diagnose's results for blocks [f_0, ..., f_{L-1}] (x_{l+1} = f_l(x_l), or f_l(params[l], x_l)) at x_0 = x.

    x is one sequence (T, D) as the blocks take it. Measured: the rms of every stream x_0 .. x_L and
    ||d x_{l+1} / d x_l||_2 of every block (`normjax.probes.foreign`; exact up to
    `jacobian.AUTO_EXACT_MAX_ENTRIES` entries, Lanczos above); the norm-site and FFN-gradient columns need a
    normjax model and read "-". The warnings are diagnose's stream-growth and block-norm ones, at `thresholds`
    (default: the `:quick` preset's). Print with `table.format_table(results)`.
    """
    rms = np.sqrt(foreign.stream_norms(blocks, x, params)["mean"])
    jac = foreign.block_jacobian_norms(blocks, x, params, method=method)
    num_layers = len(jac["block"])
    stack = {
        "num_layers": num_layers,
        "placements": ["block"] * num_layers,
        "stream_rms": rms,
        "sigma": {},
        "ln_jacobian": {},
        "block_norm": jac["block"],
        "final_norm": None,
        "ffn_grad": None,
        "given_as_functions": True,
    }
    results = {
        "model": {"arch": name, "d_model": int(np.shape(x)[-1])},
        "stacks": {name: stack},
        "stack_order": [name],
        "grad_error": None,
        "jacobian_methods": jac["methods"],
        "probe": None,
    }
    thresholds = dict(diagnose_config.get_config("quick").thresholds) if thresholds is None else thresholds
    results["warnings"] = table.warnings(to_jsonable(results), None, thresholds, "")
    return results
