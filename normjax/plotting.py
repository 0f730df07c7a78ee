"""One figure style for every experiment: placement colours, figure sizes, PNG + PDF output.

No global state is touched: figures are `matplotlib.figure.Figure` objects (no pyplot, no backend
switch) and the house style is an `rc_context` that a caller enters around its plotting:

    with plotting.style():
        fig, axes = plotting.figure(ncols=2)
        ...
        plotting.save(fig, "out/figure")
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping

import matplotlib
import numpy as np
from matplotlib import ticker
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from normjax.registry import REGISTRY  # noqa: E402

PLACEMENT_COLORS = {name: p.color for name, p in REGISTRY.items()}
THEORY_STYLE = dict(color="black", linestyle="--", linewidth=1.2)


def color(placement: str) -> str:
    """The colour of a placement in every figure (grey for anything unknown)."""
    return PLACEMENT_COLORS.get(placement, "#444444")


STYLE = {
    "font.size": 9,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.framealpha": 0.85,
}
UNIGRAM_STYLE = dict(color="grey", linestyle=":", linewidth=1.2)
STALL_STYLE = dict(color="grey", linestyle="-", linewidth=0.6)


@contextlib.contextmanager
def style() -> Iterator[None]:
    """The house style (font size, grid, spines) inside the block only: `matplotlib.rc_context`."""
    with matplotlib.rc_context(STYLE):
        yield


def figure(ncols: int = 1, nrows: int = 1, width: float = 4.2, height: float = 3.2) -> tuple[Figure, list[Axes]]:
    """(fig, axes) with axes a flat list; call inside `style()` for the house style."""
    fig = Figure(figsize=(width * ncols, height * nrows))
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, [ax for row in axes for ax in row]


def save(fig: Figure, path_stem: str) -> list[str]:
    """Writes `path_stem`.png and .pdf, returns the two paths."""
    os.makedirs(os.path.dirname(os.path.abspath(path_stem)), exist_ok=True)
    fig.tight_layout()
    paths = [f"{path_stem}.png", f"{path_stem}.pdf"]
    fig.savefig(paths[0], dpi=130)
    fig.savefig(paths[1])
    return paths


def legend_outside(ax: Axes, **kwargs) -> None:
    """A legend to the right of the axes, where it cannot cover data."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, **({"fontsize": 7} | kwargs))


def mark_unigram(ax: Axes, results: Mapping) -> Line2D | None:
    """The unigram level (results["unigram_nll"], nats per target token) as a labelled horizontal line.

    Where the results also carry `stall_nll` (normjax.train.outcomes), that level is drawn too, thinner: runs
    ending at or above it are "stalled". Where the results do not carry the unigram level, a note on the axes
    says so and None is returned.
    """
    level = results.get("unigram_nll")
    if level is None:
        ax.text(0.98, 0.98, "unigram level: not in results", transform=ax.transAxes, ha="right", va="top", fontsize=6)
        return None
    if results.get("stall_nll") is not None:
        ax.axhline(results["stall_nll"], **STALL_STYLE, label=f"stalled at or above {results['stall_nll']:.2f}")
    return ax.axhline(level, **UNIGRAM_STYLE, label=f"unigram level $H(p)$ = {level:.2f}")


def _tick_label(value, _) -> str:
    """Plain numbers ('0.2', '1.5', ...) at 1, 1.5, 2, 3, 5 and 7 times a power of ten."""
    leading = value / 10 ** np.floor(np.log10(value)) if value > 0 else 0
    return f"{value:g}" if np.isclose(leading, [1, 1.5, 2, 3, 5, 7], rtol=1e-6).any() else ""


def plain_log_ticks(ax, axis: str = "y") -> None:
    """Plain tick labels on a log axis instead of 2 x 10^-1."""
    target = getattr(ax, f"{axis}axis")
    target.set_major_formatter(ticker.FuncFormatter(_tick_label))
    target.set_minor_formatter(ticker.FuncFormatter(_tick_label))


def placements_in_order(by_placement: dict) -> list[str]:
    """The placements of a run in the house order (post, pre, ...), not JSON's sorted keys."""
    order = list(PLACEMENT_COLORS)
    return sorted(by_placement, key=lambda p: order.index(p) if p in order else len(order))
