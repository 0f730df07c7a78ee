"""Running a study resumably: WORKDIR/<name>/ (locked) with cached partial results, results.json and figures."""

from __future__ import annotations

import ast
import datetime
import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import logging
import os
import platform
import shutil
import time
from collections.abc import Callable

import jax
import numpy as np

from normjax import plotting
from normjax.io import (
    ChecksumError,
    CorruptFileError,
    FolderLock,
    config_diff,
    describe_diff,
    note_unverified,
    read_checked,
    read_json,
    refuse_stripped,
    remove_stale_tmp,
    set_aside,
    to_jsonable,
    write_json,
)
from normjax.train.config_io import ConfigError
from normjax.train.loop import STOP

_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _measured_by(module) -> bool:
    """normjax code whose change can change a measurement: not a study's rules (`<study>/verdicts.py` and
    `<study>/<topic>_verdicts.py`) or presets (`<study>/config.py`: their values are in the config), the report
    layer, the CLIs or the runner."""
    name = module.__name__
    return (
        name.startswith("normjax")
        and not name.endswith((".verdicts", "_verdicts", ".config"))
        and not name.startswith(("normjax.report", "normjax.experiments"))
        and name not in (__name__, "normjax.studies.judge", "normjax.studies.report", "normjax.studies.claims_doc")
    )


def _imported_names(module) -> set[str]:
    """The names `module`'s own import statements bind (a package also holds every imported submodule)."""
    tree = ast.parse(inspect.getsource(module))
    return {
        (alias.asname or alias.name).split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }


def _imported_in_functions(module) -> list[str]:
    """The normjax modules `module` imports inside its functions (imports on first use, which vars() misses): for
    `from normjax.x import y`, normjax.x.y when y is a module, else normjax.x."""
    names = []
    for fn in ast.walk(ast.parse(inspect.getsource(module))):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Import):
                names += [alias.name for alias in node.names if alias.name.split(".")[0] == "normjax"]
            elif (
                isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "normjax"
            ):
                for alias in node.names:
                    names.append(_module_or_parent(node.module, alias.name))
    return names


def _module_or_parent(parent: str, name: str) -> str:
    """`parent.name` when it is a module, else `parent` (name is a function, class or constant of it)."""
    if not hasattr(importlib.import_module(parent), "__path__"):  # a plain module has no submodules
        return parent
    return f"{parent}.{name}" if importlib.util.find_spec(f"{parent}.{name}") is not None else parent


def _code_modules(module, seen: set) -> None:
    """`module` and every normjax module it uses, directly or through another one (rules excluded). A module
    counts as used when `module` imports it or a name from it: a package's other submodules do not."""
    seen.add(module)
    imported = _imported_names(module)
    for name, value in list(vars(module).items()):  # importing below can add submodules to a package
        if inspect.ismodule(value) and name not in imported:
            continue
        used = value if inspect.ismodule(value) else inspect.getmodule(value)
        if used is not None and used not in seen and _measured_by(used):
            _code_modules(used, seen)
    lazy = getattr(module, "_LAZY", {}).values()  # names a package loads on first use (PEP 562)
    for target in [*lazy, *_imported_in_functions(module)]:
        used = importlib.import_module(target)
        if used not in seen and _measured_by(used):
            _code_modules(used, seen)


def code_files(fn: Callable) -> list[str]:
    """The source files of the module defining `fn` and of every normjax module it reaches (model, jacobian,
    train, ...), but not of the verdict rules, which run when the report is built."""
    modules: set = set()
    _code_modules(inspect.getmodule(fn), modules)
    return sorted({inspect.getsourcefile(m) for m in modules})


def code_fingerprint(fn: Callable) -> str:
    """sha256 of code_files(fn): a study is recomputed when the code it runs changes, not when a rule does."""
    digest = hashlib.sha256()
    for path in code_files(fn):
        with open(path, "rb") as f:
            digest.update(os.path.relpath(path, _PACKAGE_ROOT).encode() + f.read())
    return digest.hexdigest()[:16]


# Keys that choose how runs are scheduled, never what they compute: a finished study answers for any of them.
SCHEDULING_KEYS = ("sweep.workers:", "sweep.parallel:")


class StudyDir:
    """The output folder of one study: partial results survive an interrupted run.

    A study is current when its config and its own code (code_fingerprint) are the ones it was run with.
    Results or partial results of another config are an error naming the differing keys unless the run is
    forced (`clear` deletes them); those of other code are recomputed with a warning.
    """

    def __init__(self, workdir: str, name: str, config: dict, code: str = "", folder: str | None = None):
        self.name, self.path = name, folder or os.path.join(workdir, name)
        self.config = to_jsonable(config) | {"_code": code}
        self.results_path = os.path.join(self.path, "results.json")
        self._partial = os.path.join(self.path, "partial")

    def _current(self, path: str, saved_config, warn: bool = True) -> bool:
        """True when `path` was computed with this config and code. Code alone changed: False, with a warning
        when `warn` (it is recomputed). Another config: an error naming the keys (a finished workdir never answers for a
        different config)."""
        diffs = [d for d in config_diff(saved_config, self.config) if not d.startswith(SCHEDULING_KEYS)]
        if not diffs:
            return True
        if all(d.startswith("_code:") for d in diffs):
            if warn:
                logging.warning("%s was computed by other code of this study; computing it again", path)
            return False
        raise ConfigError(
            f"{path} was computed with another config ({describe_diff(diffs)}); rerun with --force"
            " to recompute it, or use another --workdir"
        )

    def finished(self, warn: bool = True, locked: bool = False) -> dict | None:
        """The saved results if this study already finished, else None (results of other code: None, with a
        warning when `warn`). Results that fail their checksum are None; when `locked` (this process holds the
        folder's lock) they are also set aside (io.set_aside), to be computed again.

        Raises:
          ConfigError: naming the differing keys when results.json holds another config.
          WorkdirError: naming results.json when it is corrupt.
        """
        if not os.path.exists(self.results_path):
            return None
        try:
            saved, checked = read_checked(self.results_path)
            if not checked:  # stripped of its checksum: refused when this code wrote it, else an older normjax's
                refuse_stripped(self.results_path, saved, self.config["_code"])
                note_unverified(self.results_path)
        except ChecksumError as e:
            if locked:
                set_aside(self.results_path, str(e))
            return None
        if not isinstance(saved, dict) or not {"config", "results"} <= set(saved):
            raise CorruptFileError(f"{self.results_path} is corrupt (no config or results); rerun with --force")
        return saved if self._current(self.results_path, saved["config"], warn) else None

    def clear(self) -> None:
        """Deletes this study's results.json and cached partial results (--force); figures are overwritten."""
        if os.path.exists(self.results_path):
            os.remove(self.results_path)
        shutil.rmtree(self._partial, ignore_errors=True)

    def open_partial(self) -> None:
        """Keep cached pieces from an interrupted run with the same config and code; drop those of other code
        (with a warning); refuse those of another config; set aside those whose marker fails its checksum."""
        marker = os.path.join(self._partial, "config.json")
        remove_stale_tmp(self.path)
        remove_stale_tmp(self._partial)
        try:
            saved = read_json(marker) if os.path.exists(marker) else None
        except CorruptFileError as e:
            set_aside(self._partial, f"{e}: which config its pieces are of is unknown")
            saved = None
        if saved is not None and not self._current(marker, saved):
            shutil.rmtree(self._partial)
        if not os.path.exists(marker):
            write_json(marker, self.config)

    def cached(self, key: str, compute: Callable[[], dict]) -> dict:
        """compute() once per key: its JSON result is stored (with a checksum) under partial/ and reused on a
        rerun.

        A piece that is damaged, fails its checksum, has none (an older normjax or a hand-made file: pieces are
        a cache, never trusted unverified) or is not a piece is set aside with a warning naming its file and
        computed again.
        """
        path = os.path.join(self._partial, f"{key}.json")
        if os.path.exists(path):
            try:
                saved, checked = read_checked(path)
            except CorruptFileError as e:
                problem = str(e)
            else:
                if checked and isinstance(saved, dict) and set(saved) == {"piece"}:
                    return saved["piece"]
                problem = f"{path} is not a cached piece of this normjax ({'no piece' if checked else 'no checksum'})"
            set_aside(path, problem)
        value = to_jsonable(compute())
        write_json(path, {"piece": value})
        if STOP.is_set():  # a Ctrl-C whose KeyboardInterrupt was lost (experiments.common.ctrl_c_kept)
            raise KeyboardInterrupt(f"stopped after the piece {key}")
        return value

    def finish(self) -> None:
        """Deletes partial/ once results.json holds everything (a finished folder keeps no cache)."""
        shutil.rmtree(self._partial, ignore_errors=True)

    def figure_stem(self, stem: str) -> str:
        return os.path.join(self.path, stem)

    def save(self, results: dict, figures: list[str], wall_time_s: float, provenance: dict | None = None) -> dict:
        """Writes results.json: the results, the figure files that exist, and the provenance (preset, the keys
        that differ from it with their values, the Python, jax, flax and numpy versions)."""
        record = {
            "experiment": self.name,
            "config": self.config,
            "provenance": _provenance(provenance or {}, self.config),
            "results": results,
            "figures": [os.path.relpath(f, self.path) for f in figures if os.path.exists(f)],
            "wall_time_s": wall_time_s,
            "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "machine": {
                "platform": platform.platform(),
                "jax": jax.__version__,
                "devices": [str(d) for d in jax.devices()],
            },
        }
        write_json(self.results_path, record)
        return read_json(self.results_path)


def _provenance(provenance: dict, config: dict) -> dict:
    """`provenance` ({"preset", "differs"}) with the differing keys' values and the library versions."""

    def value(key: str):
        node = config
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        return node

    versions = {"python": platform.python_version(), "jax": jax.__version__, "numpy": np.__version__}
    versions["flax"] = importlib.metadata.version("flax")
    overrides = {k: value(k) for k in provenance.get("differs") or []}
    return provenance | {"overrides": overrides, "versions": versions}


def run_study(
    name: str,
    workdir: str,
    config,
    compute: Callable,
    plot: Callable,
    force: bool = False,
    folder: str | None = None,
    wait: bool = False,
    provenance: dict | None = None,
) -> dict:
    """Run compute(config, study_dir) -> results and plot(results, study_dir) -> figure paths.

    Skips the work when WORKDIR/<name>/results.json (or `folder`/results.json) holds the same config and
    code; `force` recomputes. `provenance` ({"preset": name, "differs": [keys]}) is stored beside the results
    so the report marks runs whose config is not their preset's. A rerun after an interruption reuses the
    pieces compute() stored with `study_dir.cached`. The study folder is locked while it computes; with `wait`
    (the shards of one sweep, which all reach the analysis) a process finding it locked waits, then returns
    the results the other wrote.

    Raises:
      ConfigError: naming the differing keys when the folder holds results of another config (not `force`).
      WorkdirError: when another process computes the same study (not `wait`), or a file in its folder is
        corrupt.
    """
    config_dict = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    study = StudyDir(workdir, name, config_dict, code_fingerprint(compute), folder)
    if not force and (saved := study.finished()) is not None:
        print(f"[{name}] already done: {study.results_path}")
        return saved
    with FolderLock(study.path, wait=wait) as lock:
        if force:
            study.clear()
        elif (saved := study.finished(warn=False, locked=True)) is not None:  # finished by another process
            lock.remove()
            return saved
        study.open_partial()
        start = time.time()
        results = to_jsonable(compute(config, study))
        with plotting.style():
            figures = plot(results, study)
        saved = study.save(results, figures, round(time.time() - start, 1), provenance)
        study.finish()
        lock.remove()
    print(f"[{name}] wrote {study.results_path} and {len(figures)} figure files in {saved['wall_time_s']:.0f} s")
    return saved


def replot(folder: str, plot: Callable, out: str | None = None) -> list[str]:
    """Draws a finished study's figures again from its results.json (no compute) into `out` (default: `folder`).

    Returns:
      The figure paths.
    """
    saved = read_json(os.path.join(folder, "results.json"))
    study = StudyDir(os.path.dirname(folder), saved["experiment"], saved["config"], folder=out or folder)
    with plotting.style():
        return plot(saved["results"], study)
