"""Every fenced ```python block in README.md and docs/*.md runs as written (blocks of one file in order)."""

import pathlib
import re

import matplotlib
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def python_blocks(path: pathlib.Path) -> list[str]:
    return BLOCK.findall(path.read_text())


@pytest.mark.filterwarnings("error::UserWarning")  # e.g. an unconverged estimate in an example
@pytest.mark.parametrize("path", [p for p in DOCS if python_blocks(p)], ids=lambda p: p.name)
def test_python_blocks_run(path, tmp_path, monkeypatch):
    """A page's blocks share one namespace, as a reader working down the page would (each starts its imports)."""
    matplotlib.use("Agg")
    monkeypatch.chdir(tmp_path)  # anything a block writes stays in the test's folder
    namespace = {"__name__": f"doc_{path.stem}"}
    for i, block in enumerate(python_blocks(path)):
        code = compile(block, f"{path.name} python block {i + 1}", "exec")
        exec(code, namespace)  # noqa: S102  (the point of the test)
