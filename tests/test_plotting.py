"""Figures: the house style stays inside its context, and every study's figures render and are not blank."""

import os

import matplotlib
import numpy as np
import pytest
from matplotlib.image import imread

from normjax import plotting, studies
from normjax.io import read_json
from normjax.studies import runner

RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "results")
STUDIES = sorted(d for d in os.listdir(RESULTS) if os.path.isfile(os.path.join(RESULTS, d, "results.json")))


def test_the_style_is_applied_inside_its_context_only(tmp_path):
    before = dict(matplotlib.rcParams)
    with plotting.style():
        assert matplotlib.rcParams["font.size"] == plotting.STYLE["font.size"]
        fig, axes = plotting.figure(ncols=2)
        axes[0].plot([0, 1], [0, 1])
        plotting.save(fig, str(tmp_path / "f"))
    fig, _ = plotting.figure()  # outside the context: no global change either
    plotting.save(fig, str(tmp_path / "g"))
    assert dict(matplotlib.rcParams) == before


def test_unigram_level_is_a_labelled_line_or_a_visible_note():
    fig, (ax,) = plotting.figure()
    line = plotting.mark_unigram(ax, {"unigram_nll": 4.25})
    assert line.get_ydata()[0] == 4.25 and "4.25" in line.get_label()
    assert plotting.mark_unigram(ax, {}) is None
    assert any("unigram level: not in results" in t.get_text() for t in ax.texts)


def assert_not_blank(path: str) -> None:
    """A real figure: a file of some size whose pixels are not all one colour, with ink on >= 2% of them."""
    assert os.path.getsize(path) > 10_000, path
    rgb = imread(path)[..., :3]
    ink = np.any(rgb < 0.9, axis=-1).mean()
    assert ink > 0.02 and len(np.unique(rgb.reshape(-1, 3), axis=0)) > 16, (path, ink)


@pytest.mark.parametrize("name", STUDIES)
def test_every_study_figure_renders_from_saved_results(tmp_path, name):
    study = studies.get(name)
    paths = runner.replot(os.path.join(RESULTS, name), study.plot, str(tmp_path))
    saved = read_json(os.path.join(RESULTS, name, "results.json"))
    assert sorted(os.path.relpath(p, tmp_path) for p in paths) == sorted(saved["figures"])
    for path in paths:
        if path.endswith(".png"):
            assert_not_blank(path)
        else:
            assert os.path.getsize(path) > 5_000, path
