"""Fault injection: one tiny finished run, trained once per session, copied and damaged by each test."""

import os
import pathlib
import shutil

import pytest
from faults.fault_runs import train


@pytest.fixture(scope="session")
def reference(tmp_path_factory) -> pathlib.Path:
    """A finished, uninterrupted run of the fault config."""
    workdir = tmp_path_factory.mktemp("faults") / "reference"
    train(workdir)
    return workdir


@pytest.fixture
def finished(reference, tmp_path) -> pathlib.Path:
    """A copy of the finished reference run."""
    return pathlib.Path(shutil.copytree(reference, tmp_path / "run"))


@pytest.fixture
def killed(finished) -> pathlib.Path:
    """The state of a run killed after its last record: checkpoints 10 and 20, records 0-30, no summary."""
    os.remove(finished / "summary.json")
    return finished
