"""Float64 fixtures of the Jacobian and model-probe tests: fast methods compared with exact ones tightly."""

import types

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

import normjax

# Tiny float64 models: a block's Jacobian is (T d) x (T d) = 24 x 24. gelu keeps the blocks smooth
# so central differences converge as O(h^2) (relu's kinks would not).
TINY = dict(
    vocab_size=11,
    d_model=8,
    num_heads=2,
    d_ff=16,
    num_layers=2,
    activation="gelu",
    dtype="float64",
    param_dtype="float64",
)


@pytest.fixture(autouse=True)
def float64():
    with jax.enable_x64(True):
        yield


def tiny_model(seed: int = 0, **fields) -> normjax.Transformer:
    """A tiny float64 Transformer; fields override TINY. Call it under jax.enable_x64(True)."""
    return normjax.Transformer(normjax.ModelConfig(**(TINY | fields)), rngs=nnx.Rngs(seed))


def tokens(batch: int = 2, length: int = 3, seed: int = 0):
    return jax.random.randint(jax.random.key(seed), (batch, length), 1, TINY["vocab_size"])


def set_params(model, fn):
    """Replaces every nnx.Param leaf w by fn(name, w), in place.

    Inside a block, `name` is the `normjax.layer_params` name ("attn/norm/scale"); elsewhere the
    slash-joined state path.
    """
    state = nnx.state(model, nnx.Param)
    new = jax.tree_util.tree_map_with_path(lambda path, w: jnp.asarray(fn(_name(path), w)), state)
    nnx.update(model, new)


def _name(path) -> str:
    parts = [str(getattr(k, "key", k)) for k in path if str(getattr(k, "key", k)) != ".value"]
    if parts[:1] == ["stacks"] and parts[2:3] == ["layers"]:
        return "/".join(p for p in parts[4:] if p != "branch")  # as layer_params names it
    return "/".join(parts)


def central_differences(fn, x, h=1e-6):
    """J[:, j] = (f(x + h e_j) - f(x - h e_j)) / 2h, all columns in one vmap.

    In float64 the error is O(h^2 |f'''|) + O(eps |f| / h): about 1e-10 for these O(1) functions.
    """
    E_N = h * jnp.eye(x.size, dtype=x.dtype).reshape((x.size,) + x.shape)
    diff = jax.vmap(fn)(x + E_N) - jax.vmap(fn)(x - E_N)
    return diff.reshape(x.size, -1).T / (2 * h)


@pytest.fixture(scope="session")
def helpers():
    """The helpers above, for test modules (conftest itself is not importable under importlib)."""
    return types.SimpleNamespace(
        model=tiny_model, tokens=tokens, set_params=set_params, central_differences=central_differences
    )
