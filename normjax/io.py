"""Crash-safe files: JSON conversion, atomic checksummed writes (temp file, fsync, os.replace), folder locks."""

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import math
import os
import shutil
import socket
import tempfile
import threading
import time

import numpy as np

TMP_PREFIX = ".tmp-"  # temporary files are named .tmp-<pid>-<random><suffix>
LOCK_NAME = ".lock"
LEASE_HEARTBEAT_S, LEASE_STALE_S = 30.0, 300.0  # FolderLock's lease: renewed every 30 s, stale after 5 minutes
CHECKSUM_KEY = "_sha256"  # in every JSON object write_json writes: the sha256 of the rest (see checksum)
REJECTED_SUFFIX = ".rejected"  # a file that failed its checksum or structure check is renamed <file>.rejected[.n]
_noted_unverified: set[str] = set()  # one note per process for files written before checksums


class WorkdirError(RuntimeError):
    """An output folder that cannot be used as it is (busy, a corrupt file, disk full); names the path."""


class CorruptFileError(WorkdirError, ValueError):
    """A file that is not what it should be (a ValueError too, like json's own errors); names the file."""


class ChecksumError(CorruptFileError):
    """A file whose content differs from the checksum written with it: edited or damaged since."""


def to_jsonable(value):
    """Numpy/JAX scalars and arrays to Python numbers and lists; non-finite floats to None."""
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return to_jsonable(np.asarray(value).tolist())
    if isinstance(value, float | np.floating):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer | np.bool_):
        return value.item()
    return value


def _umask() -> int:
    """The process umask, read without changing it (the os.umask round trip races with other threads)."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1], 8) for line in f if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError):
        mask = os.umask(0o022)
        os.umask(mask)
        return mask


def is_disk_full(error: BaseException) -> bool:
    """Whether `error` says the disk (or quota) is full: an OSError's errno, or the message libraries that wrap
    it (orbax, tensorstore) keep."""
    return getattr(error, "errno", None) in (errno.ENOSPC, errno.EDQUOT) or os.strerror(errno.ENOSPC) in str(error)


def disk_full(path: str, nbytes: int, error: BaseException) -> WorkdirError | None:
    """The one-line error for a full disk (or quota) while writing `nbytes` to `path`; None for other errors."""
    if not is_disk_full(error):
        return None
    folder = os.path.dirname(os.path.abspath(path))
    free = shutil.disk_usage(folder).free if os.path.isdir(folder) else 0
    return WorkdirError(f"disk full: writing {path} needs {nbytes} bytes, {free} bytes free; earlier files are intact")


def writable_target(path: str) -> None:
    """Refuses a `path` that an atomic write would not replace as a plain file.

    Raises:
      WorkdirError: naming `path` when it is a symbolic link (normjax never writes through one: it could point
        outside the workdir) or a folder.
    """
    if os.path.islink(path):
        raise WorkdirError(
            f"{path} is a symbolic link (to {os.readlink(path)}); normjax writes no file through a link: remove it"
        )
    if os.path.isdir(path):
        raise WorkdirError(f"{path} is a folder; a file is written there: move the folder away")


def write_bytes(path: str, data: bytes) -> None:
    """Writes `data` to `path` atomically (temp file, fsync, os.replace), readable like any new file (0666 less
    the umask, e.g. 0644).

    Raises:
      WorkdirError: `path` is a symbolic link or a folder (writable_target), or the disk is full (the old file,
        if any, is left as it was).
    """
    writable_target(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    suffix = os.path.splitext(path)[1]
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f"{TMP_PREFIX}{os.getpid()}-", suffix=suffix)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600 files
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        if full := disk_full(path, len(data), e):
            raise full from None
        raise


def write_text(path: str, text: str) -> None:
    """Writes `text` (UTF-8) to `path` atomically, as write_bytes."""
    write_bytes(path, text.encode())


def checksum(obj) -> str:
    """sha256 of a JSON value in canonical form (sorted keys, no spaces): whitespace and number spelling
    (1.0 vs 1.00) do not change it, any changed value does."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def with_checksum(obj):
    """`obj` as JSON (to_jsonable); a dict gets CHECKSUM_KEY, the checksum of the rest."""
    obj = to_jsonable(obj)
    if not isinstance(obj, dict):
        return obj
    obj = {k: v for k, v in obj.items() if k != CHECKSUM_KEY}
    return obj | {CHECKSUM_KEY: checksum(obj)}


def verified(obj, where: str):
    """(`obj` without its checksum, True) if its checksum holds, (obj, False) if it has none (a file of an older
    normjax, or not an object).

    Raises:
      ChecksumError: naming `where` when the content differs from its checksum.
    """
    if not isinstance(obj, dict) or CHECKSUM_KEY not in obj:
        return obj, False
    rest = {k: v for k, v in obj.items() if k != CHECKSUM_KEY}
    if obj[CHECKSUM_KEY] != checksum(rest):
        raise ChecksumError(f"{where} does not match the checksum written with it (edited or damaged since)")
    return rest, True


def note_unverified(path: str) -> None:
    """Says once per process that files without a checksum (written before normjax wrote them) are read as
    they are, unverified."""
    if not _noted_unverified:
        logging.warning(
            "%s has no checksum (written by an older normjax): read unverified; rerun with --force to rewrite it"
            " (said once)",
            path,
        )
    _noted_unverified.add(path)


def refuse_stripped(path: str, obj, current_code: str) -> None:
    """Refuses a file read without a checksum (verified -> False) that the current code wrote: its
    config._code is `current_code`, and this code writes every JSON object with its checksum, so the checksum
    was stripped (with an edit, most likely). An older normjax's file (other code) passes, to be read unverified.

    Raises:
      ChecksumError: naming `path`.
    """
    config = obj.get("config") if isinstance(obj, dict) else None
    code = config.get("_code") if isinstance(config, dict) else None
    if current_code and code == current_code:
        raise ChecksumError(
            f"{path} has no checksum, but its config._code {code} is the current code's, which writes one: "
            "stripped since (edited or damaged)"
        )


def write_json(path: str, obj) -> None:
    """Writes `obj` as JSON atomically (see write_text), an object with its checksum (with_checksum)."""
    write_text(path, json.dumps(with_checksum(obj), indent=2, sort_keys=True) + "\n")


def read_checked(path: str):
    """(content of JSON file `path` without its checksum, whether it had one that holds).

    Raises:
      CorruptFileError: naming the file when it is not valid JSON (or a folder).
      ChecksumError: naming the file when its content differs from its checksum.
    """
    try:
        with open(path, "rb") as f:
            obj = json.loads(f.read())
    except IsADirectoryError:
        raise CorruptFileError(f"{path} is a folder, not a JSON file; move it away, or rerun with --force") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CorruptFileError(f"{path} is corrupt (not JSON: {e}); move it away, or rerun with --force") from None
    return verified(obj, path)


def read_json(path: str):
    """The JSON content of `path` (an object without its checksum); an object without a checksum is read
    unverified, with a note once per process (note_unverified).

    Raises:
      CorruptFileError: naming the file when it is not valid JSON.
      ChecksumError: naming the file when its content differs from its checksum.
    """
    obj, checked = read_checked(path)
    if not checked and isinstance(obj, dict):
        note_unverified(path)
    return obj


def free_name(path: str) -> str:
    """`path`, or `path`.1, `path`.2, ...: the first that does not exist."""
    suffix = 0
    while os.path.exists(path + (f".{suffix}" if suffix else "")):
        suffix += 1
    return path + (f".{suffix}" if suffix else "")


def set_aside(path: str, reason: str) -> str:
    """Renames `path` (a file or folder that must not be used) to <path>.rejected[.n] with a warning giving
    `reason`; returns the new path."""
    target = free_name(path + REJECTED_SUFFIX)
    os.rename(path, target)
    logging.warning("%s; set aside as %s, computing it again", reason, os.path.basename(target))
    return target


def config_diff(saved, wanted, prefix: str = "") -> list[str]:
    """The differences of two JSON configs as ["key: saved -> wanted", ...] with dotted keys, sorted."""
    if isinstance(saved, dict) and isinstance(wanted, dict):
        out = []
        for key in sorted(set(saved) | set(wanted)):
            missing = "<absent>"
            out += config_diff(saved.get(key, missing), wanted.get(key, missing), f"{prefix}{key}.")
        return out
    saved, wanted = to_jsonable(saved), to_jsonable(wanted)
    return [] if saved == wanted else [f"{prefix.rstrip('.')}: {saved!r} -> {wanted!r}"]


def describe_diff(diffs: list[str], limit: int = 4) -> str:
    """The first `limit` differences joined for a one-line message."""
    more = f" (and {len(diffs) - limit} more)" if len(diffs) > limit else ""
    return "; ".join(diffs[:limit]) + more


def remove_stale_tmp(folder: str) -> None:
    """Deletes temporary files left in `folder` by killed processes (their pid no longer runs)."""
    if not os.path.isdir(folder):
        return
    for name in os.listdir(folder):
        pid = name.removeprefix(TMP_PREFIX).split("-", 1)[0]
        if not name.startswith(TMP_PREFIX) or not pid.isdigit() or _alive(int(pid)):
            continue
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(folder, name))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class FolderLock:
    """An exclusive lock on a folder: flock on folder/`name`, dropped by the OS when the process dies, and a lease
    folder/`name`.owner created with O_EXCL ("host pid"), its mtime renewed every LEASE_HEARTBEAT_S, for the
    nodes of a network filesystem whose flock is not shared between them (NFS, Lustre without `flock`). A lease
    whose holder is gone (a dead pid on this host, or no heartbeat for LEASE_STALE_S) is taken over, with a warning.

    The lock file may be removed by its holder when the folder is finished (`remove`): a process that locked
    the removed file locks the new one instead.

    Raises:
      WorkdirError: at once when another process holds the lock, unless `wait` (then it waits, saying so).
    """

    def __init__(self, folder: str, *, wait: bool = False, name: str = LOCK_NAME):
        os.makedirs(folder, exist_ok=True)
        self.path = os.path.join(folder, name)
        while True:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(self.fd, 32, 0).decode(errors="replace").strip() or "?"
                if not wait:
                    os.close(self.fd)
                    raise WorkdirError(
                        f"{folder} is in use by another process (pid {holder}); wait for it to end or use another"
                        " --workdir"
                    ) from None
                logging.warning("%s is in use by another process (pid %s); waiting for it", folder, holder)
                fcntl.flock(self.fd, fcntl.LOCK_EX)
            if self._still_there():
                break
            os.close(self.fd)  # its holder removed it: lock the file now at `path`
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)
        try:
            self._lease(folder, wait)
        except BaseException:
            self.release()
            raise

    def _lease(self, folder: str, wait: bool) -> None:
        """Creates path.owner with O_EXCL (a stale one is renamed away first), then renews it in a thread."""
        self.owner, self.token = self.path + ".owner", f"{socket.gethostname()} {os.getpid()} {id(self)}"
        while True:
            try:
                fd = os.open(self.owner, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
                break
            except FileExistsError:
                holder, stale = self._lease_holder()
                if stale:
                    logging.warning("%s: taking over the lock of %s (%s)", folder, holder, stale)
                    with contextlib.suppress(FileNotFoundError):  # one taker renames it; the others find it gone
                        os.rename(self.owner, f"{self.owner}.stale-{os.getpid()}")
                        os.remove(f"{self.owner}.stale-{os.getpid()}")
                    continue
                if not wait:
                    raise WorkdirError(
                        f"{folder} is in use by another process ({holder}); wait for it to end or use another --workdir"
                    ) from None
                logging.warning("%s is in use by another process (%s); waiting for it", folder, holder)
                time.sleep(1.0)
        os.write(fd, f"{self.token}\n".encode())
        os.close(fd)
        self._stop = threading.Event()
        threading.Thread(target=self._heartbeat, args=(self._stop,), daemon=True).start()

    def _heartbeat(self, stop: threading.Event) -> None:
        while not stop.wait(LEASE_HEARTBEAT_S):
            with contextlib.suppress(OSError):
                os.utime(self.owner)

    def _lease_text(self) -> str:
        with open(self.owner) as f:
            return f.read()

    def _lease_holder(self) -> tuple[str, str | None]:
        """("pid P on host H", why it is stale or None) of the lease at path.owner."""
        try:
            host, pid = (self._lease_text().split() + ["?", "0"])[:2]
            age = time.time() - os.stat(self.owner).st_mtime
        except FileNotFoundError:
            return "gone", "removed meanwhile"
        holder = f"pid {pid} on {host}"
        if host == socket.gethostname() and pid.isdigit() and not _alive(int(pid)):
            return holder, "its process has ended"
        return holder, f"no heartbeat for {age:.0f} s" if age > LEASE_STALE_S else None

    def _still_there(self) -> bool:
        try:
            return os.stat(self.path).st_ino == os.fstat(self.fd).st_ino
        except FileNotFoundError:
            return False

    def release(self) -> None:
        """Releases the lock (idempotent)."""
        if getattr(self, "_stop", None) is not None:
            self._stop.set()
            self._stop = None
            with contextlib.suppress(OSError):
                if self._lease_text().strip() == self.token:  # ours still (not taken over as stale)
                    os.remove(self.owner)
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def remove(self) -> None:
        """Deletes the lock file, then releases the lock (a finished folder keeps no lock file)."""
        if self.fd is not None:
            with contextlib.suppress(FileNotFoundError):
                os.remove(self.path)
        self.release()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.release()
