"""The studies' model specs (normjax.specs): parsing, refusals of no-op options, the paper presets' lists."""

import pytest

from normjax import specs, studies
from normjax.studies import schema
from normjax.studies.deep_training import config as deep_training
from normjax.studies.grad_norms_at_init import config as grad_norms_at_init
from normjax.studies.hidden_norms import config as hidden_norms
from normjax.studies.jacobian_spectrum import config as jacobian_spectrum


@pytest.mark.parametrize(
    ("text", "fields"),
    [
        ("pre", {"placement": "pre", "norm": "layernorm"}),
        ("pre:scalenorm", {"placement": "pre", "norm": "scalenorm"}),
        ("pre+qk_norm", {"placement": "pre", "norm": "layernorm", "qk_norm": True}),
        ("post+no_bias", {"placement": "post", "norm": "layernorm", "norm_bias": False}),
        ("sandwich+embedding_norm", {"placement": "sandwich", "norm": "layernorm", "embedding_norm": True}),
        ("pre:dyt+no_bias+qk_norm", {"placement": "pre", "norm": "dyt", "norm_bias": False, "qk_norm": True}),
        ("rezero+qk_norm+no_bias", {"placement": "rezero", "norm": "layernorm", "qk_norm": True, "norm_bias": False}),
    ],
)
def test_parse_gives_the_model_config_fields(text, fields):
    spec = specs.parse(text)
    assert spec.fields == fields and spec.text == text
    assert ":" not in spec.file_key


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("bogus", "unknown placement 'bogus'"),
        ("pre:bogus", "unknown norm 'bogus'"),
        ("pre:", "unknown norm ''"),
        ("pre+bogus", "unknown option 'bogus'"),
        ("pre+qk_norm+qk_norm", "repeated"),
        ("pre:rmsnorm+no_bias", "no_bias needs a norm kind with a bias"),
        ("pre:scalenorm+no_bias", "no_bias needs a norm kind with a bias"),
        ("rezero+no_bias", "'rezero' has no norm"),
        ("peri_ln+embedding_norm", "already normalises the embeddings"),
        ("hybrid+qk_norm", "already normalises queries and keys"),
        ("hybrid_star+qk_norm", "already normalises queries and keys"),
        ("pre:none+qk_norm", "no-op"),
    ],
)
def test_bad_specs_name_the_spec_and_the_choices(text, words):
    with pytest.raises(ValueError) as e:
        specs.parse(text)
    message = str(e.value)
    assert "\n" not in message and repr(text) in message and words in message
    assert "hybrid_star" in message and "scalenorm" in message and "embedding_norm" in message  # the choices


def test_paper_presets_take_the_registry_placements_and_the_option_variants():
    for module, key, study in (
        (hidden_norms, "placements", "hidden_norms"),
        (jacobian_spectrum, "placements", "jacobian_spectrum"),
        (grad_norms_at_init, "placements", "grad_norms_at_init"),
        (deep_training, "runs", "deep_training"),
    ):
        paper = module.get_config("paper")[key]
        assert paper == module.PAPER_SPECS, study
        schema.validate(studies.get(study), module.get_config("paper"))  # every entry measurable by the study
        assert {"pre+qk_norm", "pre:scalenorm", "pre+embedding_norm"} <= set(paper)
        for text in paper:
            specs.parse(text)
    assert "post+no_bias" in deep_training.get_config("paper").runs
