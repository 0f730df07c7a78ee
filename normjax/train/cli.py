"""Helpers for the experiment mains: --config loading and overrides with one-line errors, clean exits, devices."""

from __future__ import annotations

import ast
import contextlib
import sys

import jax
import ml_collections
from absl import flags
from ml_collections import config_flags

from normjax.io import WorkdirError
from normjax.train.config_io import ConfigError, did_you_mean
from normjax.train.data_text import DataError


@contextlib.contextmanager
def exit_on_config_error():
    """Turns a ConfigError or DataError into one `config error: ...` line, and a WorkdirError (a busy workdir,
    a damaged file, a full disk) into one `error: ...` line, on stderr with exit status 2 (no traceback)."""
    try:
        yield
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        sys.exit(2)
    except DataError as e:
        print(f"data error: {e}", file=sys.stderr)
        sys.exit(2)
    except WorkdirError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


def _one_line(error: BaseException) -> str:
    """absl's message without the traceback it embeds for an error inside get_config."""
    lines = [line for line in str(error).splitlines() if line.strip()]
    if any(line.startswith("Traceback") for line in lines):
        lines = [lines[0], lines[-1]]
    return " ".join(lines)


def load_config(spec: str) -> ml_collections.ConfigDict:
    """The config of `--config=spec` ("file.py" or "file.py:arg") without command-line overrides.

    Raises:
      ConfigError: a missing file or an error inside its get_config, in one line.
    """
    fv = flags.FlagValues()
    try:
        config_flags.DEFINE_config_file("config", spec, flag_values=fv, sys_argv=["prog"])
        return fv["config"].value
    except Exception as e:  # noqa: BLE001 (get_config may raise anything; the user needs one line)
        raise ConfigError(f"--config={spec}: {type(e).__name__}: {_one_line(e)}") from None


def override_key(arg: str) -> str | None:
    """`section.key` of a `--config.section.key[=value]` argument, else None."""
    name = arg.lstrip("-").split("=", 1)[0]
    return name.removeprefix("config.") if name.startswith("config.") and arg.startswith("-") else None


def _literal(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def check_overrides(argv: list[str], base: ml_collections.ConfigDict) -> list[str]:
    """Checks every `--config.a.b=v` key against `base` (naming the closest valid key) and turns a comma
    list for a tuple-valued key (`--config.placements=post,pre`) into a tuple literal.

    Raises:
      ConfigError: an unknown key, or an override of config.sweep.axes.
    """
    out = []
    for arg in argv:
        path = override_key(arg)
        if path is None:
            out.append(arg)
            continue
        if path.startswith("sweep.axes"):
            raise ConfigError(f"config.{path}: sweep axes are set in the config file, not on the command line")
        node, parts = base, path.split(".")
        for i, part in enumerate(parts):
            if not isinstance(node, ml_collections.ConfigDict) or part not in node:
                where = "config." + ".".join(parts[:i]) if i else "config"
                valid = list(node.keys()) if isinstance(node, ml_collections.ConfigDict) else []
                hint = f"; valid keys of {where}: {', '.join(valid)}" if valid else f"; {where} has no keys"
                raise ConfigError(f"unknown key config.{path}{did_you_mean(part, valid)}{hint}")
            node = node[part]
        text = arg.split("=", 1)[1] if "=" in arg else None
        if isinstance(node, tuple | list) and text is not None and not text.strip().startswith(("(", "[")):
            items = tuple(_literal(x.strip()) for x in text.split(",") if x.strip())
            arg = f"--config.{path}={items!r}"
        out.append(arg)
    return out


def parse_flags(argv: list[str], flag_values: flags.FlagValues = flags.FLAGS) -> list[str]:
    """Parses argv into `flag_values` (absl `flags_parser`); config errors print one line and exit with 2.

    The `config` flag must already be defined on `flag_values` with `sys_argv=argv` (config_flags
    registers the `--config.*` overrides it finds there).
    """
    with exit_on_config_error():
        try:
            return flag_values(argv)
        except flags.Error as e:
            raise ConfigError(_one_line(e)) from None
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"bad --config override: {_one_line(e)}") from None


def setup_devices(distributed: bool) -> int:
    """Calls jax.distributed.initialize() when asked; returns the global device count."""
    if distributed:
        jax.distributed.initialize()
    return jax.device_count()
