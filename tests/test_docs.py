"""Every fenced ```python block in README.md and docs/*.md runs as written (blocks of one file in order)."""

import os
import pathlib
import re
import subprocess
import sys
import warnings

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def python_blocks(path: pathlib.Path) -> list[str]:
    return BLOCK.findall(path.read_text())


def run_page(path: pathlib.Path) -> None:
    """A page's blocks share one namespace, as a reader working down the page would (each starts its imports)."""
    import matplotlib

    matplotlib.use("Agg")
    warnings.simplefilter("error", UserWarning)  # e.g. an unconverged estimate in an example
    namespace = {"__name__": f"doc_{path.stem}"}
    for i, block in enumerate(python_blocks(path)):
        code = compile(block, f"{path.name} python block {i + 1}", "exec")
        exec(code, namespace)  # noqa: S102  (the point of the test)


@pytest.mark.parametrize("path", [p for p in DOCS if python_blocks(p)], ids=lambda p: p.name)
def test_python_blocks_run(path, tmp_path):
    """Each page in a fresh interpreter (a reader's new session: e.g. jax.distributed.initialize must come
    before any other JAX call), in a temporary folder so anything a block writes stays there."""
    env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(
        [sys.executable, __file__, str(path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-4000:]


if __name__ == "__main__":
    run_page(pathlib.Path(sys.argv[1]))
