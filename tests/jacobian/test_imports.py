"""`import normjax.jacobian` loads jax and numpy, not flax, optax or the models; `import normjax` stays complete."""

import subprocess
import sys

import pytest

MODELS = ("normjax.model", "normjax.probing", "normjax.blocks", "normjax.train", "normjax.probes")


def loaded_after(code: str) -> list[str]:
    """The modules a fresh interpreter holds after running `code` (stdout: one name a line)."""
    script = f"{code}\nimport sys\nprint('\\n'.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_the_jacobian_package_loads_neither_flax_nor_optax_nor_the_models():
    loaded = loaded_after("import normjax.jacobian\nfrom normjax import jacobian\njacobian.spectral_norm")
    heavy = [m for m in loaded if m.split(".")[0] in ("flax", "optax") or m.startswith(MODELS)]
    assert heavy == [] and "jax" in loaded and "numpy" in loaded


def test_a_plain_function_is_analysed_without_loading_flax():
    code = "import jax.numpy as jnp\nfrom normjax import jacobian\njacobian.spectral_norm(jnp.tanh, jnp.ones(3))"
    assert not [m for m in loaded_after(code) if m.split(".")[0] == "flax"]


def test_the_top_level_names_load_on_first_use():
    code = (
        "import normjax\nassert 'flax' not in __import__('sys').modules\n"
        "normjax.ModelConfig, normjax.Transformer, normjax.probe, normjax.block_fn, normjax.jacobian.spectral_norm"
    )
    loaded = loaded_after(code)
    assert "normjax.model" in loaded and "flax" in loaded  # the README's names still resolve


def test_every_public_name_resolves_and_an_unknown_one_is_an_attribute_error():
    import normjax

    for name in normjax.__all__:
        assert getattr(normjax, name) is not None
    with pytest.raises(AttributeError, match="no_such_name"):
        normjax.no_such_name  # noqa: B018
