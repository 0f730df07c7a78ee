"""Helpers for the experiment mains: flag parsing with clean config errors, device setup."""

import contextlib
import sys

import jax
from absl import flags

from normjax.io import WorkdirError
from normjax.train.config_io import ConfigError, as_dict, default_config


def _check_override_keys(argv: list[str]) -> None:
    """Names an unknown `--config.section.key=...` override before absl applies it."""
    defaults = as_dict(default_config())
    for arg in argv[1:]:
        if not arg.startswith("--config."):
            continue
        path = arg.removeprefix("--config.").split("=", 1)[0]
        section, _, key = path.partition(".")
        if section == "sweep" and key.startswith("axes"):
            raise ConfigError(f"config.{path}: sweep axes are set in the config file, not on the command line")
        if section not in defaults:
            raise ConfigError(f"unknown config section {section!r} in {arg!r}; valid: {', '.join(defaults)}")
        if key not in defaults[section]:
            raise ConfigError(
                f"unknown key config.{path}; valid keys of config.{section}: {', '.join(defaults[section])}"
            )


def parse_flags(argv: list[str]) -> list[str]:
    """An absl `flags_parser`: config errors print one clear line and exit with status 2."""
    with exit_on_config_error():
        _check_override_keys(argv)
        try:
            return flags.FLAGS(argv)
        except flags.Error as e:
            lines = [line for line in str(e).splitlines() if line.strip()]
            if any(line.startswith("Traceback") for line in lines):  # an error inside get_config
                lines = [lines[0], lines[-1]]
            raise ConfigError(" ".join(lines)) from None
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"bad --config override: {e}") from None


@contextlib.contextmanager
def exit_on_config_error():
    """Turns a ConfigError into `config error: ...` and a WorkdirError (a busy workdir, a damaged file, a
    full disk) into `error: ...` on stderr, with exit status 2 (no traceback)."""
    try:
        yield
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        sys.exit(2)
    except WorkdirError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


def setup_devices(distributed: bool) -> int:
    """Calls jax.distributed.initialize() when asked; returns the global device count."""
    if distributed:
        jax.distributed.initialize()
    return jax.device_count()
