"""Package hygiene: one version, a typed-package marker, the license pyproject declares."""

import importlib.metadata
import os
import re
import tomllib

import normjax

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_version_is_defined_once_and_installed_metadata_agrees():
    assert re.fullmatch(r"\d+\.\d+\.\d+", normjax.__version__)
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "normjax.__version__"}
    try:
        installed = importlib.metadata.version("normjax")
    except importlib.metadata.PackageNotFoundError:
        return  # run from a checkout that is not installed
    assert installed == normjax.__version__


def test_py_typed_ships_and_the_license_is_the_declared_one():
    assert os.path.exists(os.path.join(os.path.dirname(normjax.__file__), "py.typed"))
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)
    assert project["project"]["license"] == "Apache-2.0"
    assert "py.typed" in project["tool"]["setuptools"]["package-data"]["normjax"]
    with open(os.path.join(ROOT, "LICENSE")) as f:
        text = f.read()
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text
