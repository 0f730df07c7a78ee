"""One figure style for every experiment: placement colours, figure sizes, PNG + PDF output."""

from __future__ import annotations

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from normjax.registry import REGISTRY  # noqa: E402

PLACEMENT_COLORS = {name: p.color for name, p in REGISTRY.items()}
THEORY_STYLE = dict(color="black", linestyle="--", linewidth=1.2)


def color(placement: str) -> str:
    """The colour of a placement in every figure (grey for anything unknown)."""
    return PLACEMENT_COLORS.get(placement, "#444444")


def figure(ncols: int = 1, nrows: int = 1, width: float = 4.2, height: float = 3.2):
    """(fig, axes) in the house style; axes is always a flat list."""
    plt.rcParams.update(
        {"font.size": 9, "axes.grid": True, "grid.alpha": 0.3, "axes.spines.top": False, "axes.spines.right": False}
    )
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False)
    return fig, [ax for row in axes for ax in row]


def save(fig, path_stem: str) -> list[str]:
    """Writes `path_stem`.png and .pdf, closes the figure, returns the two paths."""
    os.makedirs(os.path.dirname(os.path.abspath(path_stem)), exist_ok=True)
    fig.tight_layout()
    paths = [f"{path_stem}.png", f"{path_stem}.pdf"]
    fig.savefig(paths[0], dpi=130)
    fig.savefig(paths[1])
    plt.close(fig)
    return paths
