"""normjax's own mains get one OpenBLAS thread, installed or in the repository; a library import changes nothing."""

import os
import subprocess
import sys

import pytest

from normjax import blas_threads


@pytest.mark.parametrize(
    "argv, module",
    [
        (["python", "-m", "normjax.studies.hidden_norms", "--workdir=x"], "normjax.studies.hidden_norms"),
        (["python", "-u", "-X", "dev", "-m", "experiments.train"], "experiments.train"),
        (["python", "script.py", "-m", "normjax.x"], None),
        (["python", "-c", "import normjax"], None),
        (["python"], None),
    ],
)
def test_the_main_module_of_a_command_line(argv, module):
    assert blas_threads.main_module(argv) == module


def _threads(args: list[str], env: dict) -> str:
    code = "import os, normjax; print(os.environ.get('OPENBLAS_NUM_THREADS', 'unset'))"
    argv = [sys.executable, *args] if args else [sys.executable, "-c", code]
    out = subprocess.run(
        argv, capture_output=True, text=True, env=env, timeout=120, cwd=env["PYTHONPATH"].split(os.pathsep)[0]
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


def test_a_normjax_main_sets_one_thread_and_a_library_import_does_not(tmp_path):
    """Subprocesses: `python -m experiments.<main>` (the shims' prefix, here a stand-in package) gets 1; a user's
    program or main that imports normjax keeps OpenBLAS's default; a user's own setting is kept."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    show = "import os, normjax\nprint(os.environ.get('OPENBLAS_NUM_THREADS', 'unset'))\n"
    for package in ("experiments", "their_project"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
        (tmp_path / package / "show_threads.py").write_text(show)
    env |= {"PYTHONPATH": f"{tmp_path}{os.pathsep}{env.get('PYTHONPATH', '')}"}
    assert _threads([], env) == "unset"  # `import normjax` in a user's program
    assert _threads(["-m", "their_project.show_threads"], env) == "unset"  # someone else's main
    assert _threads(["-m", "experiments.show_threads"], env) == "1"
    assert _threads(["-m", "experiments.show_threads"], env | {"OPENBLAS_NUM_THREADS": "4"}) == "4"


def test_the_setting_is_made_before_numpy_loads(monkeypatch):
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.setitem(sys.modules, "numpy", sys.modules["numpy"])
    assert blas_threads.limit_for_mains(["python", "-m", "normjax.studies.cost"]) is False  # too late: unchanged
    assert "OPENBLAS_NUM_THREADS" not in os.environ
    monkeypatch.delitem(sys.modules, "numpy")
    assert blas_threads.limit_for_mains(["python", "-m", "normjax.studies.cost"]) is True
    assert os.environ["OPENBLAS_NUM_THREADS"] == "1"
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "8")
    assert blas_threads.limit_for_mains(["python", "-m", "normjax.studies.cost"]) is False  # the user's choice wins
