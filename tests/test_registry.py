"""The placement registry drives validation, the README table, the colours and the studies' placement lists."""

import pathlib

import pytest

import normjax
from normjax import plotting, registry
from normjax.experiments.configs import deep_training, grad_norms_at_init, hidden_norms, jacobian_spectrum

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
            assert w.norms in (0, 1, 2) and w.gate in ("none", "scalar", "channel")
            assert set(w.qkv_norm) <= {"q", "k", "v"}


def test_colours_and_labels_are_distinct():
    entries = registry.REGISTRY.values()
    assert len({p.color for p in entries}) == len({p.label for p in entries}) == len(registry.PLACEMENTS)


def test_unknown_placement_names_the_choices():
    with pytest.raises(ValueError, match="'bogus'.*'hybrid_star'"):
        registry.get("bogus")


def test_studies_paper_presets_follow_the_registry():
    for module, study in (
        (hidden_norms, "hidden_norms"),
        (jacobian_spectrum, "jacobian_spectrum"),
        (grad_norms_at_init, "grad_norms_at_init"),
    ):
        paper, placements = module.get_config("paper").placements, registry.study_placements(study)
        assert paper[: len(placements)] == placements  # then the option variants (normjax.specs)
        assert set(module.get_config("quick").placements) <= set(registry.PLACEMENTS)
    runs = deep_training.get_config("paper").runs
    assert set(registry.study_placements("deep_training")) <= set(runs)
    new = ("peri_ln", "hybrid", "subln", "normformer")
    for study in registry.ALL_STUDIES:
        assert set(registry.study_placements(study)) & set(new), study
