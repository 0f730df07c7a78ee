"""Running a study resumably: WORKDIR/<name>/ with cached partial results, results.json and figures."""

from __future__ import annotations

import datetime
import hashlib
import inspect
import os
import platform
import shutil
import time
from collections.abc import Callable

import jax

from normjax import plotting
from normjax.io import read_json, to_jsonable, write_json


def _study_modules(module, seen: set) -> None:
    """`module` and every normjax.studies module it uses, directly or through another one."""
    seen.add(module)
    for value in vars(module).values():
        used = value if inspect.ismodule(value) else inspect.getmodule(value)
        if used is not None and used.__name__.startswith("normjax.studies") and used not in seen:
            _study_modules(used, seen)


def code_fingerprint(fn: Callable) -> str:
    """sha256 of the study's code: the module defining `fn` and every normjax.studies module it uses."""
    modules: set = set()
    _study_modules(inspect.getmodule(fn), modules)
    digest = hashlib.sha256()
    for path in sorted(inspect.getsourcefile(m) for m in modules):
        with open(path, "rb") as f:
            digest.update(os.path.basename(path).encode() + f.read())
    return digest.hexdigest()[:16]


class StudyDir:
    """The output folder of one study: partial results survive an interrupted run.

    A study is current when its config and its own code (code_fingerprint) are the ones it was run with;
    otherwise it is recomputed (partial results included).
    """

    def __init__(self, workdir: str, name: str, config: dict, code: str = "", folder: str | None = None):
        self.name, self.path = name, folder or os.path.join(workdir, name)
        self.config = to_jsonable(config) | {"_code": code}
        self.results_path = os.path.join(self.path, "results.json")
        self._partial = os.path.join(self.path, "partial")

    def finished(self) -> dict | None:
        """The saved results if this study already finished with the same config, else None."""
        if not os.path.exists(self.results_path):
            return None
        saved = read_json(self.results_path)
        return saved if saved.get("config") == self.config else None  # config includes the code

    def open_partial(self) -> None:
        """Keep cached pieces from an interrupted run with the same config; drop them otherwise."""
        marker = os.path.join(self._partial, "config.json")
        if os.path.exists(marker) and read_json(marker) != self.config:
            shutil.rmtree(self._partial)
        if not os.path.exists(marker):
            write_json(marker, self.config)

    def cached(self, key: str, compute: Callable[[], dict]) -> dict:
        """compute() once per key: its JSON result is stored under partial/ and reused on a rerun."""
        path = os.path.join(self._partial, f"{key}.json")
        if os.path.exists(path):
            return read_json(path)
        value = to_jsonable(compute())
        write_json(path, value)
        return value

    def figure_stem(self, stem: str) -> str:
        return os.path.join(self.path, stem)

    def save(self, results: dict, figures: list[str], wall_time_s: float) -> dict:
        record = {
            "experiment": self.name,
            "config": self.config,
            "results": results,
            "figures": [os.path.relpath(f, self.path) for f in figures],
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


def run_study(
    name: str, workdir: str, config, compute: Callable, plot: Callable, force: bool = False, folder: str | None = None
) -> dict:
    """Run compute(config, study_dir) -> results and plot(results, study_dir) -> figure paths.

    Skips the work when WORKDIR/<name>/results.json (or `folder`/results.json) holds the same config
    (unless `force`); a rerun after an interruption reuses the pieces compute() stored with
    `study_dir.cached`.
    """
    config_dict = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    study = StudyDir(workdir, name, config_dict, code_fingerprint(compute), folder)
    if not force and (saved := study.finished()) is not None:
        print(f"[{name}] already done: {study.results_path}")
        return saved
    if force and os.path.exists(study.path):
        shutil.rmtree(study.path)
    study.open_partial()
    start = time.time()
    results = to_jsonable(compute(config, study))
    with plotting.style():
        figures = plot(results, study)
    saved = study.save(results, figures, round(time.time() - start, 1))
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
