"""Orbax checkpoints of the whole train state plus the data position, each verified by its sha256 manifest."""

import contextlib
import hashlib
import json
import logging
import os
import signal
import threading

import jax
import numpy as np
import orbax.checkpoint as ocp

from normjax.io import WorkdirError, disk_full, free_name, is_disk_full, read_json, write_json
from normjax.train.steps import TrainState

MANIFEST = "normjax_sha256.json"  # written into checkpoints/<step>/ once orbax has committed the step
REJECTED = "checkpoints_rejected"  # beside checkpoints/: damaged or unverified steps are moved here


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _files(folder: str) -> list[str]:
    """Every file under `folder` but the manifest, as sorted relative paths."""
    out = []
    for root, _, names in os.walk(folder):
        out += [os.path.relpath(os.path.join(root, n), folder) for n in names]
    return sorted(f for f in out if f != MANIFEST)


def manifest(folder: str, fingerprint: str) -> dict:
    """The sha256 of every file of a checkpoint folder and the fingerprint of the run that wrote it."""
    return {"fingerprint": fingerprint, "files": {f: _sha256(os.path.join(folder, f)) for f in _files(folder)}}


def damage(folder: str) -> str | None:
    """Why checkpoint `folder` cannot be trusted (missing manifest, missing, extra or changed files); None if intact."""
    path = os.path.join(folder, MANIFEST)
    if not os.path.exists(path):
        return "it has no checksum manifest (a stray folder, a write that was cut short, or an older normjax)"
    try:
        saved = read_json(path)
        files = dict(saved["files"])
    except (WorkdirError, KeyError, TypeError, ValueError):
        return f"its manifest {MANIFEST} is corrupt"
    present = _files(folder)
    if sorted(files) != present:
        missing, extra = sorted(set(files) - set(present)), sorted(set(present) - set(files))
        return f"files missing: {missing}, unexpected: {extra}"
    changed = [f for f in present if _sha256(os.path.join(folder, f)) != files[f]]
    return f"{changed[0]} does not match its checksum" if changed else None


def _not_disk_full(record: logging.LogRecord) -> bool:
    """False for a log record of a full disk (orbax's writer threads and leftover asyncio tasks log one
    traceback each)."""
    error = record.exc_info[1] if record.exc_info else None
    return not is_disk_full(error if error is not None else Exception(record.getMessage()))


def _after_disk_full(record: logging.LogRecord) -> bool:
    """_not_disk_full, as the filter that stays once the disk was full."""
    return _not_disk_full(record)


QUIETED = ("absl", "asyncio")  # orbax logs through absl.logging; its unfinished write tasks through asyncio


def _filter(log_filter, add: bool = True) -> None:
    for name in QUIETED:
        logger = logging.getLogger(name)
        logger.addFilter(log_filter) if add else logger.removeFilter(log_filter)


@contextlib.contextmanager
def _quiet_disk_full():
    """While a checkpoint is written, orbax logs no disk-full tracebacks: `Checkpointer.save` says it in one
    line. After a full disk they stay hidden (its unfinished tasks log theirs when collected, up to the exit)."""
    _filter(_not_disk_full)
    try:
        yield
    except Exception as e:
        if is_disk_full(e):
            _filter(_after_disk_full)
        raise
    finally:
        _filter(_not_disk_full, add=False)


@contextlib.contextmanager
def _sigint_deferred():
    """A Ctrl-C (SIGINT) that arrives inside takes effect on leaving: KeyboardInterrupt is raised then.

    orbax's synchronous save runs asyncio loops and waits on its writer threads from the calling thread; a
    KeyboardInterrupt raised in the middle leaves those threads writing into an uncommitted folder, and they
    fail at interpreter exit ("Event loop is closed", "cannot schedule new futures after shutdown"). Only the
    main thread receives signals; elsewhere (a threaded sweep stops at its next step) this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if not callable(previous):  # SIG_IGN or SIG_DFL: no KeyboardInterrupt to defer
        yield
        return
    received = []
    signal.signal(signal.SIGINT, lambda signum, frame: received.append((signum, frame)))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        previous(*received[0])  # the default handler raises KeyboardInterrupt


class Checkpointer:
    """Saves (state without hparams/consts, data position) every call; keeps the newest `keep`.

    On opening, every step folder is verified against its manifest: damaged or unverified ones are moved
    to checkpoints_rejected/ with a warning, so a resume starts from the newest intact checkpoint.
    """

    def __init__(self, directory: str, keep: int = 2, fingerprint: str = ""):
        self.directory, self.fingerprint = os.path.abspath(directory), fingerprint
        self.main = jax.process_index() == 0
        if self.main:
            self._reject_damaged()
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True, enable_async_checkpointing=False)
        self.manager = ocp.CheckpointManager(self.directory, options=options)

    def _folder(self, step: int) -> str:
        return os.path.join(self.directory, str(step))

    def _reject_damaged(self) -> None:
        """Moves damaged step folders aside; raises for an intact one written by another run."""
        if not os.path.isdir(self.directory):
            return
        for name in sorted(os.listdir(self.directory)):
            folder = os.path.join(self.directory, name)
            if not name.isdigit() or not os.path.isdir(folder):
                continue
            reason = damage(folder)
            if reason is None:
                if read_json(os.path.join(folder, MANIFEST)).get("fingerprint") != self.fingerprint:
                    raise WorkdirError(
                        f"{folder} is a checkpoint of another config (a foreign checkpoint); move it away,"
                        " or rerun with --force"
                    )
                continue
            target = free_name(os.path.join(os.path.dirname(self.directory), REJECTED, name))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.rename(folder, target)
            logging.warning("checkpoint %s is not used: %s; moved to %s", folder, reason, target)

    @staticmethod
    def _tree(state: TrainState, data_pos) -> dict:
        # hparams and consts come from the config, so a checkpoint never overrides a changed config
        return {
            "params": state.params,
            "opt_state": state.opt_state,
            "step": state.step,
            "rng": state.rng,
            "bad_steps": state.bad_steps,
            "diverged_at": state.diverged_at,
            "data_pos": np.asarray(data_pos, np.int64),
        }

    def latest_step(self) -> int | None:
        """The newest verified step (damaged ones were moved aside when this Checkpointer was opened)."""
        return self.manager.latest_step()

    def save(self, step: int, state: TrainState, data_pos: int) -> None:
        """Blocks until the checkpoint and its manifest are committed (the metrics written before stay valid).

        A Ctrl-C meanwhile raises KeyboardInterrupt once they are (see `_sigint_deferred`).

        Raises:
          WorkdirError: when the disk is full (the earlier checkpoints stay intact).
        """
        tree = self._tree(state, data_pos)
        with _sigint_deferred():
            try:
                with _quiet_disk_full():
                    self.manager.save(step, args=ocp.args.StandardSave(tree))
                    self.manager.wait_until_finished()
            except Exception as e:  # orbax and tensorstore wrap OSError in their own types
                nbytes = sum(x.nbytes for x in jax.tree.leaves((state.params, state.opt_state)))
                if full := disk_full(self._folder(step), nbytes, e):
                    raise full from None
                raise
            self._write_manifest(step)

    def _write_manifest(self, step: int) -> None:
        if self.main:
            write_json(os.path.join(self._folder(step), MANIFEST), manifest(self._folder(step), self.fingerprint))

    def restore(self, step: int, like: TrainState) -> tuple[TrainState, int]:
        """(state, data position) of checkpoint `step`; `like` gives structure and shardings.

        Raises:
          WorkdirError: naming the folder when it does not fit `like` (a foreign checkpoint).
        """
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, self._tree(like, 0))
        try:
            tree = self.manager.restore(step, args=ocp.args.StandardRestore(abstract))
        except (ValueError, KeyError, TypeError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise WorkdirError(f"{self._folder(step)} does not fit this run's state ({first}); move it away") from None
        state = like.replace(**{k: v for k, v in tree.items() if k != "data_pos"})
        return state, int(tree["data_pos"])

    def close(self) -> None:
        """Waits for any save still in progress, then closes the manager (its threads end before the exit)."""
        with _sigint_deferred():
            self.manager.wait_until_finished()
            self.manager.close()


def fingerprint(config: dict) -> str:
    """sha256 of a run's resolved config (config.json's content): checkpoints of other configs are refused."""
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]
