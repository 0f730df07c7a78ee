"""The architecture drawn from imports: one folder per study, one list, layers that import only downward."""

import ast
import importlib
import pathlib
import shutil

import pytest

from normjax import studies
from normjax.experiments import common
from normjax.studies import __main__ as listing
from normjax.studies import claims_doc
from normjax.studies.report import build_report

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "normjax"
STUDY_DIRS = {s.name: PACKAGE / "studies" / s.name for s in studies.STUDIES}


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imports(path: pathlib.Path, top_level_only: bool = False) -> set[str]:
    """The normjax modules a file imports (a `from package import name` counts the submodule when it is one)."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else ast.walk(tree)
    out = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("normjax")}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("normjax"):
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                out.add(sub if sub in MODULES else node.module)
    return out


def test_the_jacobian_core_imports_nothing_else_of_normjax():
    for name, path in MODULES.items():
        if name.startswith("normjax.jacobian"):
            outside = {m for m in _imports(path) if not m.startswith("normjax.jacobian")}
            assert not outside, f"{name} imports {outside}: the Jacobian core knows no model"


def test_module_imports_have_no_cycle():
    """Between modules (a package's facade `import normjax` left out: every submodule loads it first)."""
    graph = {n: {m for m in _imports(p, True) if m != "normjax" and m in MODULES} for n, p in MODULES.items()}
    state: dict[str, int] = {}

    def visit(node, trail):
        state[node] = 1
        for nxt in graph[node]:
            if state.get(nxt) == 1:
                pytest.fail(f"import cycle: {' -> '.join(trail[trail.index(nxt) :] + [nxt])}")
            if nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = 2

    for node in graph:
        if node not in state:
            visit(node, [node])


def _names_in_code(path: pathlib.Path) -> set[str]:
    """Identifiers, import paths and string constants of a file; docstrings and comments left out."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Module | ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef)
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }
    words = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            words.add(node.id)
        elif isinstance(node, ast.Attribute):
            words.add(node.attr)
        elif isinstance(node, ast.alias):
            words |= set(node.name.split("."))
        elif isinstance(node, ast.ImportFrom) and node.module:
            words |= set(node.module.split("."))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            words |= set(node.value.replace("/", ".").replace(":", ".").split("."))
    return words


def test_no_module_outside_a_study_folder_names_a_study():
    registry = PACKAGE / "studies" / "__init__.py"  # the one list
    for path in MODULES.values():
        if path == registry or any(d in path.parents for d in STUDY_DIRS.values()):
            continue
        named = _names_in_code(path) & set(STUDY_DIRS)
        assert not named, f"{path.relative_to(ROOT)} names the studies {named}; that belongs in their folders"


STEPPERS = {"run_steps", "train_step", "vmapped_train_step"}  # normjax.train's loop and its compiled steps


def test_every_study_trains_through_the_one_trainer():
    """Outside normjax/train no module steps a model itself: studies train by train_probed or run_group (with probe
    hooks), never by a train step they jit or loop over themselves."""
    for path in MODULES.values():
        if PACKAGE / "train" in path.parents:
            continue
        tree = ast.parse(path.read_text())
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        used |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        used |= {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
        assert not used & STEPPERS, f"{path.relative_to(ROOT)} uses {used & STEPPERS}: train through normjax.train.loop"


def test_the_report_layer_imports_no_study_and_measurement_no_report():
    for name, path in MODULES.items():
        if name.startswith("normjax.report"):
            assert not {m for m in _imports(path) if m.startswith("normjax.studies")}, name
        in_study = any(d in path.parents for d in STUDY_DIRS.values())
        rules = path.stem == "verdicts" or path.stem.endswith("_verdicts")  # a study's rule modules
        if in_study and not rules and path.stem != "__init__":
            reached = {m for m in _imports(path, top_level_only=True) if m.startswith("normjax.report")}
            assert not reached, f"{name} imports {reached}: measurement must not depend on the report layer"


def test_every_study_folder_has_its_pieces_and_is_in_the_list():
    folders = {p.parent.name for p in (PACKAGE / "studies").glob("*/__init__.py")}
    assert folders == set(STUDY_DIRS), "a study folder is missing from normjax.studies.STUDIES (or the reverse)"
    for name, folder in STUDY_DIRS.items():
        assert {"__init__.py", "measure.py", "config.py", "__main__.py"} <= {p.name for p in folder.iterdir()}, name
        study = studies.get(name)
        assert (study.verdicts is None) == (not study.in_report) == (not (folder / "verdicts.py").exists())


def test_a_new_study_is_one_folder_and_one_registry_line(tmp_path, monkeypatch, capsys):
    """The template folder (docs/study_template), copied and listed once, runs, resumes, is judged and
    reported, and shows in docs/claims.md, with no other file touched."""
    shutil.copytree(ROOT / "docs" / "study_template", tmp_path / "pkg" / "toy_study")
    monkeypatch.setattr(studies, "__path__", [*studies.__path__, str(tmp_path / "pkg")])
    toy = importlib.import_module("normjax.studies.toy_study")
    main = importlib.import_module("normjax.studies.toy_study.__main__")
    monkeypatch.setattr(studies, "STUDIES", (*studies.STUDIES, toy.STUDY))  # the one registry line
    monkeypatch.setitem(studies.BY_NAME, "toy_study", toy.STUDY)
    monkeypatch.setattr(listing, "STUDIES", studies.STUDIES)
    monkeypatch.setattr(claims_doc, "STUDIES", studies.STUDIES)

    assert listing.main([]) == 0 and capsys.readouterr().out.split()[-1] == "toy_study"
    workdir = tmp_path / "results"
    assert common.run_cli(main.EXPERIMENT, ["prog", f"--workdir={workdir}", "--progress=false"]) == 0
    assert (workdir / "toy_study" / "results.json").is_file()
    assert common.run_cli(main.EXPERIMENT, ["prog", f"--workdir={workdir}", "--progress=false"]) == 0
    assert "already done" in capsys.readouterr().out
    assert common.run_cli(main.EXPERIMENT, ["prog", f"--workdir={workdir}", "--config.num_seeds=0"]) == 2
    report = pathlib.Path(build_report(str(workdir))).read_text()
    assert "| S4 | folk claim | holds |" in report and "### toy_study" in report
    doc = claims_doc.render()
    assert "`toy_study`" in doc and "| `GROWTH` | 1 | theory |" in doc
    assert _study_checks(toy.STUDY) >= 2  # the suite's per-study checks pass on the copy as it is


def _study_checks(study) -> int:
    """Runs every check of tests/test_verdicts_seeds.py that takes a `study` (for each preset where it takes one)
    on `study`; returns how many ran. Before issue 36 the template failed them (its Threshold had no source)."""
    import inspect

    import test_verdicts_seeds as checks  # tests/ is on pytest's pythonpath

    ran = 0
    for name, check in inspect.getmembers(checks, inspect.isfunction):
        params = inspect.signature(check).parameters
        if name.startswith("test_") and "study" in params:
            for preset in checks.PRESETS if "preset" in params else [None]:
                check(study, preset) if preset else check(study)
                ran += 1
    return ran


def test_the_documented_commands_work_after_pip_install():
    """Issue 36: README.md and docs/diagnose.md call each CLI as `python -m normjax...` (an installed module); the
    repository shim `python -m experiments.<name>` shows only as an alias beside it."""
    import importlib.util
    import re

    for doc in ("README.md", "docs/diagnose.md"):
        text = (ROOT / doc).read_text()
        for match in re.finditer(r"python -m ([\w.]+)", text):
            module, before = match.group(1).rstrip("."), text[max(0, match.start() - 60) : match.start()]
            if module.startswith("experiments"):
                assert re.search(r"\balso\b|\balias\b|\bshims?\b", before), (
                    f"{doc}: {match.group(0)} is not named an alias"
                )
            else:
                assert module.startswith("normjax") and importlib.util.find_spec(module), f"{doc}: {module}"
