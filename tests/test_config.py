"""ModelConfig validation: every bad value names the field, the value and what is valid."""

import pytest

import normjax
from normjax.config import PLACEMENTS


@pytest.mark.parametrize(
    "fields, words",
    [
        (dict(placement="postln"), ["placement", "'postln'", "'pre'", "'deepnorm'"]),
        (dict(norm="batchnorm"), ["norm", "'batchnorm'", "'rmsnorm'"]),
        (dict(arch="gpt"), ["arch", "'gpt'", "'encoder_decoder'"]),
        (dict(d_model=30, num_heads=4), ["num_heads", "4", "d_model=30"]),
        (dict(d_model=0), ["d_model", "0", "positive"]),
        (dict(num_layers=-2), ["num_layers", "-2", "positive"]),
        (dict(num_layers=3, placement=("pre", "post")), ["placement", "3 entries", "got 2"]),
        (dict(num_layers=2, placement=("pre", "mixln")), ["placement", "'mixln'"]),
        (dict(activation="swish"), ["activation", "'swish'", "'gelu'"]),
        (dict(dropout=1.0), ["dropout", "[0, 1)"]),
        (dict(theory=True, num_heads=4), ["num_heads", "theory", "single-head"]),
        (dict(scan_layers=True, placement="mixln", num_layers=4), ["scan_layers", "one placement"]),
        (dict(scan_layers=True, placement="hybrid_star", num_layers=3), ["scan_layers", "hybrid_first"]),
        (dict(num_decoder_layers=3), ["num_decoder_layers", "encoder_decoder"]),
        (dict(deepnorm_alpha=-1.0), ["deepnorm_alpha", "positive"]),
        (dict(dtype="float8"), ["dtype", "'float8'", "'bfloat16'"]),
        (dict(norm="scale_norm"), ["norm", "'scale_norm'", "'scalenorm'"]),
        (dict(qk_norm="yes"), ["qk_norm", "'yes'", "True or False"]),
        (dict(norm_bias=0), ["norm_bias", "True or False"]),
        (dict(num_layers=2, placement=("pre", "hybrid_star")), ["placement", "'hybrid_star'"]),
    ],
)
def test_invalid_values_raise_naming_field_value_and_choices(fields, words):
    with pytest.raises(ValueError) as err:
        normjax.ModelConfig(**fields)
    for word in words:
        assert word in str(err.value), (word, str(err.value))


def test_mixln_resolves_post_then_pre():
    cfg = normjax.ModelConfig(num_layers=8, placement="mixln")
    assert cfg.layer_placements("decoder") == ("post",) * 2 + ("pre",) * 6
    assert cfg.replace(mixln_fraction=0.5).layer_placements("decoder") == ("post",) * 4 + ("pre",) * 4


def test_per_layer_tuple_splits_encoder_then_decoder():
    placement = ("post", "pre", "rezero", "deepnorm", "admin")
    cfg = normjax.ModelConfig(arch="encoder_decoder", num_layers=2, num_decoder_layers=3, placement=placement)
    assert cfg.layer_placements("encoder") == ("post", "pre")
    assert cfg.layer_placements("decoder") == ("rezero", "deepnorm", "admin")


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_final_norm_is_automatic_by_placement(placement):
    cfg = normjax.ModelConfig(num_layers=4, placement=placement)
    # The stream leaves these un-normalized (HybridNorm's code ends with ln_f too): they get a final norm.
    with_final = ("pre", "sandwich", "peri_ln", "branch_post", "layerscale", "mixln", "hybrid", "hybrid_first")
    with_final += ("lns",)  # LayerNorm Scaling is Pre-LN with scaled norm outputs (keel and b2t end in a norm)
    with_final += ("shc", "dhc", "mhc", "mhc_lite")  # hyper-connections read out N(sum of the streams)
    with_final += ("pre_gpas", "sandwich_gpas")  # GPAS keeps its base placement's final norm (deepnorm_gpas: none)
    expected = placement in with_final + ("hybrid_star", "subln", "normformer", "resi_dual", "siamese")
    assert cfg.has_final_norm("decoder") is expected
    if placement in ("resi_dual", "siamese"):  # x_L + N(d_L), N(N_a(x_L) + N_b(d_L)): final_norm=False refused
        with pytest.raises(ValueError, match="final_norm=False"):
            cfg.replace(final_norm=False)
    elif placement == "ngpt":  # unit hidden states, no norm modules: final_norm=True is refused
        with pytest.raises(ValueError, match="final_norm=True"):
            cfg.replace(final_norm=True)
    else:
        assert cfg.replace(final_norm=not expected).has_final_norm("decoder") is (not expected)
    assert cfg.replace(norm="none").has_final_norm("decoder") is False


def test_config_is_frozen():
    cfg = normjax.ModelConfig()
    with pytest.raises(AttributeError):
        cfg.d_model = 8
