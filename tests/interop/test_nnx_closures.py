"""NNX modules that sow, draw dropout masks or scan: passed directly they work; a closure raises one line, the fix."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from normjax import jacobian


class Sow(nnx.Module):
    def __init__(self, rngs):
        self.fc = nnx.Linear(4, 4, rngs=rngs)

    def __call__(self, x):
        y = jnp.tanh(self.fc(x))
        self.sow(nnx.Intermediate, "h", y)
        return y


class Dropout(nnx.Module):
    def __init__(self, rngs):
        self.fc, self.drop = nnx.Linear(4, 4, rngs=rngs), nnx.Dropout(0.5, rngs=rngs)

    def __call__(self, x):
        return self.drop(jnp.tanh(self.fc(x)))


class Scan(nnx.Module):
    def __init__(self, rngs):
        self.layers = nnx.split_rngs(splits=3)(nnx.vmap(lambda r: nnx.Linear(4, 4, rngs=r)))(rngs)

    def __call__(self, x):
        return nnx.scan(lambda x, layer: jnp.tanh(layer(x)), in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)(x, self.layers)


@pytest.mark.parametrize("cls", [Sow, Dropout, Scan], ids=lambda c: c.__name__)
def test_stateful_modules_passed_directly_or_copied_work_and_closures_say_how(cls):
    module, x = cls(nnx.Rngs(0)), jnp.ones((2, 4))
    graphdef, state = nnx.split(module)
    copied = lambda x: nnx.merge(graphdef, state, copy=True)(x)
    want = np.asarray(jax.jacfwd(copied)(x)).reshape(8, 8)  # dropout: the mask of the module's current rng count
    for f in (module, copied, module):  # passed directly twice: the mask is frozen, the module is not advanced
        np.testing.assert_allclose(jacobian.jacobian(f, x), want, rtol=1e-12)
    with pytest.raises(TypeError, match=r"^normjax\.jacobian: f closes over an nnx\.Module .*copy=True") as e:
        jacobian.spectral_norm(lambda x: module(x), x, method="exact")
    assert "\n" not in str(e.value)
