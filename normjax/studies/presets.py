"""Choosing a preset (:quick, :standard, :paper) in a study's `get_config(arg)`, and the lists presets share."""


def preset(arg: str, presets: dict):
    """presets[arg]() with a clear error naming the valid presets."""
    if arg not in presets:
        raise ValueError(f"unknown preset {arg!r}: valid presets are {', '.join(presets)}")
    return presets[arg]()


# The models the init-time studies' :paper presets measure: every layer placement that differs from the others at
# init, then option variants (normjax.specs). dhc is left out (it equals shc at init: its dynamic weights start
# at 0), and so are the placements that only training separates (branch_post, skipinit, layerscale, tfixup,
# hybrid_first); each study adds or leaves out what it cannot measure.
INIT_TIME_SPECS = (
    "post", "pre", "sandwich", "peri_ln", "deepnorm", "admin", "rezero", "hybrid", "hybrid_star", "subln",
    "normformer", "resi_dual", "ngpt", "lns", "keel", "b2t", "shc", "mhc", "mhc_lite", "siamese",
    "pre+qk_norm", "pre:scalenorm", "pre+embedding_norm",
)  # fmt: skip
