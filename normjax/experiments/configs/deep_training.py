"""deep_training presets.

python -m experiments.deep_training --config=experiments/configs/deep_training.py:quick --workdir=results
"""

import ml_collections

from normjax.experiments.configs import preset
from normjax.specs import study_specs


def _base():
    c = ml_collections.ConfigDict()
    c.runs = ("post", "pre", "deepnorm")  # trained at every depth; specs as in normjax.specs ("pre:dyt")
    c.depths = (6, 12, 24)
    c.side_runs = ("tfixup", "pre:dyt")  # R3, R6: compared with pre at side_depths
    c.side_depths = (6,)
    c.d_model, c.num_heads, c.d_ff = 64, 2, 128  # DeepNet Fig. 5's 64-128-2
    c.seq_len, c.batch_size, c.max_bytes, c.data_seed = 64, 16, 2_000_000, 0
    c.lr, c.num_steps = 3e-3, 50  # constant lr from step 0: no warmup
    c.optimizer, c.b1, c.b2, c.eps = "adam", 0.9, 0.98, 1e-9
    c.early_steps = 10  # the model update is averaged over steps 1..early_steps
    # D2's update is measured by repeating the first early_steps at this small lr: at lr one Adam step already
    # changes F(x) by about ||F(x)|| for every placement, which hides any dependence on depth.
    c.update_lr = 1e-4
    c.probe_every = 10  # probes (update, LN inputs, layer gradients) every step up to early_steps, then this often
    c.final_window = 10  # final loss = mean train loss of the last steps (each batch seen once)
    c.divergence_factor, c.divergence_patience, c.divergence_check_every = 1.5, 10, 10  # loss > 1.5 ln V
    c.seed = 0
    return c


def _paper():
    c = _base()
    c.runs = study_specs("deep_training")  # registry placements and option variants
    c.depths = (6, 12, 18, 24, 50, 100)
    c.side_runs, c.side_depths = ("pre:dyt",), (6, 24, 100)
    c.lr, c.num_steps, c.batch_size, c.seq_len = 5e-4, 2000, 64, 128
    c.early_steps, c.probe_every, c.final_window = 100, 50, 100
    return c


def get_config(arg: str = "quick"):
    return preset(arg, {"quick": _base, "paper": _paper})
