"""Interop tests run with float64 enabled (the references); each framework's test is skipped if it is absent."""

import jax
import pytest
from interop.frameworks import FRAMEWORKS


@pytest.fixture(autouse=True)
def float64():
    with jax.enable_x64(True):
        yield


@pytest.fixture(params=sorted(FRAMEWORKS), scope="module")
def fw(request):
    with jax.enable_x64(True):
        return FRAMEWORKS[request.param]()
