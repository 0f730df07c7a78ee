"""The placement registry drives validation, the README table, the colours and the studies' placement lists."""

import pathlib

import pytest

import normjax
from normjax import plotting, registry, specs
from normjax.studies.deep_training import config as deep_training
from normjax.studies.grad_norms_at_init import config as grad_norms_at_init
from normjax.studies.hidden_norms import config as hidden_norms
from normjax.studies.jacobian_spectrum import config as jacobian_spectrum

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_readme_table_is_the_registrys():
    assert registry.markdown_table() in (ROOT / "README.md").read_text()


def test_docs_cover_every_placement_and_option():
    text = (ROOT / "docs" / "placements.md").read_text() + (ROOT / "README.md").read_text()
    for name in registry.PLACEMENTS + ("scalenorm", "norm_bias", "qk_norm", "embedding_norm"):
        assert f"`{name}" in text, name


@pytest.mark.parametrize("name", registry.PLACEMENTS)
def test_every_entry_is_complete(name):
    entry = registry.get(name)
    assert entry.name == name and entry.label and entry.formula and entry.reference
    assert plotting.color(name) == entry.color
    if entry.is_recipe:
        names = entry.layers(normjax.ModelConfig(num_layers=5, placement=name), 5)
        assert len(names) == 5 and set(names) <= set(registry.LAYER_PLACEMENTS)
    else:
        assert set(entry.wirings) == set(registry.SUBLAYERS)
        for w in entry.wirings.values():
            assert w.norms in (0, 1, 2, 3) and w.gate in ("none", "scalar", "channel")
            assert set(w.qkv_norm) <= {"q", "k", "v"}


def test_colours_and_labels_are_distinct():
    entries = registry.REGISTRY.values()
    assert len({p.color for p in entries}) == len({p.label for p in entries}) == len(registry.PLACEMENTS)


def test_unknown_placement_names_the_choices():
    with pytest.raises(ValueError, match="'bogus'.*'hybrid_star'"):
        registry.get("bogus")


def test_every_layer_placement_is_measured_by_some_init_time_study():
    """The studies name what they measure in their own presets; none of the registry is left unmeasured."""
    init_time = {*hidden_norms.PAPER_SPECS, *jacobian_spectrum.PAPER_SPECS, *grad_norms_at_init.PAPER_SPECS}
    missing = set(registry.PLACEMENTS) - {specs.parse(text).placement for text in init_time}
    # trained only (dhc is shc at init: its dynamic weights start at 0; a GPAS placement is its base at init, alpha 0)
    gpas = {"pre_gpas", "sandwich_gpas", "deepnorm_gpas"}
    assert missing == {"branch_post", "skipinit", "layerscale", "tfixup", "hybrid_first", "dhc"} | gpas, missing
    for module in (hidden_norms, jacobian_spectrum, grad_norms_at_init):
        assert module.get_config("paper").placements == module.PAPER_SPECS
        assert set(module.get_config("quick").placements) <= set(registry.PLACEMENTS)
    assert deep_training.get_config("paper").runs == deep_training.PAPER_SPECS
    for paper in (hidden_norms.PAPER_SPECS, grad_norms_at_init.PAPER_SPECS, deep_training.PAPER_SPECS):
        assert {"peri_ln", "hybrid", "subln", "normformer"} & set(paper)
