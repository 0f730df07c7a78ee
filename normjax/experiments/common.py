"""What every experiment main shares: flags, config loading, validation before any write, the run.

Every main accepts --config (a file, default the packaged quick preset), --config.<key>=<value> overrides,
--workdir, --print_config (validate, print the resolved config as JSON, write nothing, exit 0) and
--progress. Any bad value, file or folder ends the program with one `config error: ...` line and
exit status 2 before anything is written. A Ctrl-C ends it with one `interrupted: ...` line saying what was
kept for a rerun to resume from, and exit status 130.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import glob
import json
import os
import signal
import sys
import threading
from collections.abc import Callable

import tqdm.std
from absl import app, flags, logging
from ml_collections import config_flags

from normjax import host_memory, studies
from normjax.io import config_diff
from normjax.studies import runner, schema
from normjax.train import cli, loop, memory
from normjax.train.checkpoint import MANIFEST
from normjax.train.config_io import ConfigError

STUDY, TRAIN, SWEEP = "study", "train", "sweep"
INTERRUPTED = 130  # the exit status of a program ended by Ctrl-C (128 + SIGINT)


@dataclasses.dataclass(frozen=True)
class Experiment:
    """One CLI. `validate(args, num_devices)` raises ConfigError (or DataError) or returns the resolved
    config (a JSON-able dict); `run(args)` does the work once everything is checked."""

    name: str
    kind: str  # STUDY: WORKDIR/<name>/ with results.json; TRAIN: one run folder; SWEEP: a grid's folder
    validate: Callable
    run: Callable
    config_path: str  # the packaged presets (`get_config(arg)`), the default --config


@dataclasses.dataclass(frozen=True)
class Args:
    """The parsed flags (`config` with the overrides applied)."""

    config: object
    overrides: tuple[str, ...]  # dotted keys set by --config.<key>=...
    workdir: str
    progress: bool
    force: bool = False
    shard: str = "0/1"
    distributed: bool = False
    provenance: dict = dataclasses.field(default_factory=dict)  # {"preset": name, "differs": [dotted keys]}


def packaged_config(path: str) -> str | None:
    """The packaged preset file a path names when it is not a file here: `normjax/studies/<name>/config.py`
    (from any directory, installed or not), the older `experiments/configs/<name>.py`, and the train presets."""
    parts = os.path.normpath(path).split(os.sep)
    name = None
    if len(parts) >= 3 and parts[-1] == "config.py" and parts[-3] == "studies":
        name = parts[-2]
    elif len(parts) >= 2 and parts[-2] == "configs" and parts[-1].endswith(".py"):
        name = parts[-1][: -len(".py")]
    if name in studies.BY_NAME:
        return studies.BY_NAME[name].config_path
    if name == "train" or parts[-2:] == ["train", "presets.py"]:
        from normjax.train import presets

        return os.path.abspath(presets.__file__)
    return None


def resolve_config_path(spec: str, default: str) -> str:
    """`--config` as given when that file exists; `:preset` alone is that preset of the main's own file
    (`default`); a path to a packaged preset file (see packaged_config) reads the installed one.

    Raises:
      ConfigError: neither exists.
    """
    path, sep, arg = spec.partition(":")
    if not path and sep:
        return default + sep + arg
    if os.path.isfile(path):
        return spec
    packaged = packaged_config(path)
    if packaged is not None:
        return packaged + sep + arg
    raise ConfigError(f"--config file {path!r} not found (relative to {os.getcwd()}; presets: {default}, or :<preset>)")


def _rewrite_config_arg(argv: list[str], default: str) -> tuple[list[str], str | None]:
    """argv with every --config=<file> resolved (`default`: the main's own preset file); the last one (None when
    absent)."""
    out, spec = [], None
    for i, arg in enumerate(argv):
        if arg.startswith(("--config=", "-config=")):
            spec = resolve_config_path(arg.split("=", 1)[1], default)
            arg = f"--config={spec}"
        elif arg in ("--config", "-config") and i + 1 < len(argv):
            raise ConfigError("write --config=<file>[:preset] (with '=')")
        out.append(arg)
    return out, spec


def define_flags(exp: Experiment, argv: list[str], fv: flags.FlagValues, default_spec: str) -> None:
    """The flags of `exp` on `fv` (config_flags reads the --config.* overrides to register from argv)."""
    config_flags.DEFINE_config_file(
        "config", default_spec, f"Config file and preset (:quick or :paper) of {exp.name}.", flag_values=fv,
        lock_config=True, sys_argv=argv,
    )  # fmt: skip
    default_workdir = "results" if exp.kind == STUDY else None
    where = {STUDY: "results go to WORKDIR/<name>/", TRAIN: "the run's folder", SWEEP: "the sweep's folder"}
    flags.DEFINE_string("workdir", default_workdir, f"Output folder: {where[exp.kind]}.", flag_values=fv)
    flags.DEFINE_bool("print_config", False, "Validate, print the resolved config, write nothing.", flag_values=fv)
    flags.DEFINE_bool("progress", True, "Show progress bars.", flag_values=fv)
    force_help = {
        STUDY: "Recompute WORKDIR/<name>/ even if its results are current or come from another config.",
        TRAIN: "Delete what --workdir holds of this run and train it from step 0.",
        SWEEP: "Retrain this shard's runs and recompute the analysis.",
    }
    flags.DEFINE_bool("force", False, force_help[exp.kind], flag_values=fv)
    if exp.kind != STUDY:
        flags.DEFINE_bool("distributed", False, "Call jax.distributed.initialize() first.", flag_values=fv)
    if exp.kind == SWEEP:
        flags.DEFINE_string("shard", "0/1", "i/n: run only every n-th run, starting at run i.", flag_values=fv)


def parse_argv(exp: Experiment, fv: flags.FlagValues, argv: list[str]) -> list[str]:
    """Defines and parses the flags; any config error prints one line and exits with status 2."""
    with cli.exit_on_config_error():
        argv, spec = _rewrite_config_arg(list(argv), exp.config_path)
        default_spec = f"{exp.config_path}:quick"
        argv = cli.check_overrides(argv, cli.load_config(spec or default_spec))
        define_flags(exp, argv, fv, default_spec)
    return cli.parse_flags(argv, fv)


def check_workdir(path: str | None) -> None:
    """An output folder that exists or can be made: not empty, not a file, not under a file, writable.

    Raises:
      ConfigError: naming the folder and the problem.
    """
    if path is None:
        raise ConfigError("--workdir is required: the output folder")
    if not path:
        raise ConfigError("--workdir is empty; give the output folder")
    full = os.path.abspath(path)
    if os.path.exists(full) and not os.path.isdir(full):
        raise ConfigError(f"--workdir={path!r} is a file, not a folder")
    parent = full
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise ConfigError(f"--workdir={path!r} is under {parent!r}, which is a file")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"--workdir={path!r}: {parent!r} is not writable")


@contextlib.contextmanager
def progress_bars(enabled: bool):
    """With enabled=False every tqdm bar of the run (library and studies, whatever they pass) is disabled."""
    if enabled:
        yield
        return
    init = tqdm.std.tqdm.__init__

    @functools.wraps(init)
    def disabled(self, *args, **kwargs):
        init(self, *args, **(kwargs | {"disable": True}))

    tqdm.std.tqdm.__init__ = disabled
    try:
        yield
    finally:
        tqdm.std.tqdm.__init__ = init


def provenance(exp: Experiment, argv: list[str], config) -> dict:
    """Which preset the run's config came from and the dotted keys in which it differs from that preset
    (command-line overrides), for the report to mark runs that are not their preset."""
    _, spec = _rewrite_config_arg(list(argv), exp.config_path)
    spec = spec or f"{exp.config_path}:quick"
    path, _, preset = spec.partition(":")
    name = preset or "default"
    if os.path.abspath(path) != os.path.abspath(exp.config_path):
        name = f"{os.path.basename(path)}:{name}"  # a user's own config file
    diffs = config_diff(cli.load_config(spec).to_dict(), config.to_dict())
    return {"preset": name, "differs": [d.split(":", 1)[0] for d in diffs]}


def _args(exp: Experiment, fv: flags.FlagValues, argv: list[str]) -> Args:
    overrides = tuple(k for k in map(cli.override_key, argv) if k)
    extra = dict(force=fv.force) | ({} if exp.kind == STUDY else dict(distributed=fv.distributed))
    extra |= dict(shard=fv.shard) if exp.kind == SWEEP else {}
    extra |= dict(provenance=provenance(exp, argv, fv.config))
    return Args(fv.config, overrides, fv.workdir, fv.progress, **extra)


def _checkpoint_kept(workdir: str) -> str:
    folder = os.path.join(workdir, "checkpoints")
    names = os.listdir(folder) if os.path.isdir(folder) else []
    steps = [int(n) for n in names if n.isdigit() and os.path.exists(os.path.join(folder, n, MANIFEST))]
    return f"the checkpoint at step {max(steps)} in {folder}" if steps else f"no checkpoint yet in {workdir}"


def kept(exp: Experiment, workdir: str) -> str:
    """What an interrupted run of `exp` left in `workdir` for the same command to resume from, in words."""
    if exp.kind == TRAIN:
        return _checkpoint_kept(workdir)
    folder = os.path.join(workdir, exp.name)
    if exp.kind == STUDY:
        pieces = [p for p in glob.glob(os.path.join(folder, "partial", "*.json")) if not p.endswith("config.json")]
        return f"{len(pieces)} computed pieces in {os.path.join(folder, 'partial')}"
    runs = glob.glob(os.path.join(folder, "*", "summary.json"))
    return f"{len(runs)} finished runs in {folder} and the newest checkpoints of the others"


@contextlib.contextmanager
def ctrl_c_kept():
    """A Ctrl-C inside raises KeyboardInterrupt and sets loop.STOP, and the block ends as interrupted even if it
    returns: a KeyboardInterrupt raised inside a finalizer (JAX's gc callback) is lost, so the training loops and
    the study pieces check STOP too (seen: a study ran to its end and exited 0 after a Ctrl-C). Python would print
    that lost one as "Exception ignored in ..." with its traceback (seen in CI: a Ctrl-C that ended in 9 lines);
    with STOP set it says nothing new, so sys.unraisablehook drops it while the block runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        loop.STOP.set()
        raise KeyboardInterrupt

    def unraisable(info):
        if not (isinstance(info.exc_value, KeyboardInterrupt) and loop.STOP.is_set()):
            previous_hook(info)

    loop.STOP.clear()
    previous, previous_hook = signal.signal(signal.SIGINT, interrupt), sys.unraisablehook
    sys.unraisablehook = unraisable
    try:
        yield
        if loop.STOP.is_set():
            raise KeyboardInterrupt
    finally:
        signal.signal(signal.SIGINT, previous)
        sys.unraisablehook = previous_hook
        loop.STOP.clear()


def main(exp: Experiment, fv: flags.FlagValues, argv: list[str], full_argv: list[str]) -> None:
    """Keep freed host memory (`normjax.host_memory`), validate, then --print_config or check the workdir and run;
    config errors (a bad NORMJAX_KEEP_FREED_MEMORY too) exit with status 2, a Ctrl-C with one line saying what
    was kept and status 130."""
    logging.set_verbosity(logging.WARNING)
    workdir = None  # set once the run may write
    try:
        with cli.exit_on_config_error():
            try:
                host_memory.keep_freed_memory()
            except ValueError as e:
                raise ConfigError(str(e)) from None
            if len(argv) > 1:
                raise ConfigError(f"unexpected arguments: {' '.join(argv[1:])}")
            args = _args(exp, fv, full_argv)
            num_devices = cli.setup_devices(args.distributed)
            resolved = exp.validate(args, num_devices)
            if fv.print_config:
                print(json.dumps(resolved, indent=2, default=str))
                return
            check_workdir(args.workdir)
            if exp.kind in (STUDY, SWEEP):  # a study's folder is WORKDIR/<name>, a sweep's too (warmup_ablation)
                check_workdir(os.path.join(args.workdir, exp.name))
            workdir = args.workdir
            with progress_bars(args.progress), ctrl_c_kept():
                exp.run(args)
    except KeyboardInterrupt:
        what = "before anything was written" if workdir is None else f"kept {kept(exp, workdir)}"
        print(f"interrupted: {what}; rerun the same command to resume", file=sys.stderr)
        sys.exit(INTERRUPTED)


def launch(exp: Experiment) -> None:
    """app.run the experiment on sys.argv (the `if __name__ == "__main__"` of every main)."""
    argv = list(sys.argv)
    app.run(lambda rest: main(exp, flags.FLAGS, rest, argv), flags_parser=lambda a: parse_argv(exp, flags.FLAGS, a))


def study(record: studies.Study, after: Callable | None = None) -> Experiment:
    """The Experiment of a study (`normjax.studies.Study`): its schema, a memory check, runner.run_study, then
    `after(saved)` (e.g. printing a table)."""

    def validate(args: Args, num_devices: int) -> dict:
        schema.validate(record, args.config)
        memory.check_fits(*schema.largest_model(record, args.config.to_dict()), training=record.training)
        return args.config.to_dict()

    def run(args: Args) -> None:
        saved = runner.run_study(
            record.name, args.workdir, args.config, record.compute, record.plot, force=args.force,
            provenance=args.provenance,
        )  # fmt: skip
        if after is not None:
            after(saved)

    return Experiment(record.name, STUDY, validate, run, record.config_path)


def run_cli(exp: Experiment, argv: list[str]) -> int:
    """Runs the CLI in this process on fresh flags (for tests); returns its exit status."""
    fv = flags.FlagValues()
    try:
        rest = parse_argv(exp, fv, argv)
        main(exp, fv, rest, argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 1
    return 0
