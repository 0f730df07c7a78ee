"""Crash-safe result files: atomic JSON and an fsync'd, checksummed JSONL metrics log (see metric_writers)."""

import json
import os

from normjax import io
from normjax.io import CorruptFileError, disk_full, read_json, to_jsonable, write_json, write_text  # noqa: F401


def _line(record: dict) -> str:
    """One metrics record as a JSONL line with its checksum (io.with_checksum)."""
    return json.dumps(io.with_checksum(record), sort_keys=True) + "\n"


def read_jsonl(path: str) -> list[dict]:
    """The records of a JSONL metrics log, one dict with an int "step" per line (without their checksums).

    Only a torn last line (no newline: the process died while appending it) is skipped. Records without a
    checksum (an older normjax) are read unverified, with a note once (io.note_unverified).

    Raises:
      CorruptFileError: naming the file and line of any other line that is not such a record.
      ChecksumError: naming the file and line of a record that differs from its checksum.
    """
    if not os.path.exists(path):
        return []
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    # the text after the last newline is empty, or a torn record
    records = []
    for number, line in enumerate(lines[:-1], start=1):
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            record = None
        if not isinstance(record, dict) or not isinstance(record.get("step"), int):
            raise CorruptFileError(
                f"{path}:{number}: not a metrics record ({line[:60]!r}); the log was damaged: restore the file,"
                " or rerun with --force to retrain from step 0"
            )
        record, checked = io.verified(record, f"{path}:{number}")
        if not checked:
            io.note_unverified(path)
        records.append(record)
    return records


def check_steps(path: str, records: list[dict], last_step: int, want: list[int]) -> None:
    """Raises CorruptFileError naming the file and line unless the steps of `records` increase and those up to
    `last_step` are exactly `want`."""
    hint = "restore the file, or rerun with --force to retrain from step 0"
    for number in range(1, len(records)):
        if records[number]["step"] <= records[number - 1]["step"]:
            raise CorruptFileError(
                f"{path}:{number + 1}: step {records[number]['step']} again or out of order (two processes wrote"
                f" this log?); {hint}"
            )
    kept = [r["step"] for r in records if r["step"] <= last_step]
    for number, (step, expected) in enumerate(zip(kept, want, strict=False), start=1):
        if step != expected:
            raise CorruptFileError(
                f"{path}:{number}: step {step} where step {expected} was expected (the log was cut or edited); {hint}"
            )
    if len(kept) != len(want):
        has = f"ends at step {kept[-1]}" if kept else "is missing or empty"
        raise CorruptFileError(
            f"{path} {has} but the run needs records up to step {want[-1]} (the log was cut or deleted); {hint}"
        )


class MetricsLog:
    """metrics.jsonl: one record per logged step, each appended with flush + fsync."""

    def __init__(self, path: str):
        self.path = path

    def cut_back(self, last_step: int, want: list[int]) -> None:
        """Keeps the records up to the checkpoint at `last_step`, which must be exactly the steps `want`.

        The records after it (the tail of a killed run, rewritten when it is retrained) are dropped and a torn
        last line is repaired; any other damage stops the run (nothing is deleted).

        Raises:
          CorruptFileError: naming the file and line of a damaged log, or the missing steps.
        """
        records = read_jsonl(self.path)
        check_steps(self.path, records, last_step, want)
        kept = [r for r in records if r["step"] <= last_step]
        torn = False
        if os.path.exists(self.path) and os.path.getsize(self.path):
            with open(self.path, "rb") as f:
                f.seek(-1, os.SEEK_END)
                torn = f.read() != b"\n"
        if len(kept) < len(records) or torn:
            write_text(self.path, "".join(_line(r) for r in kept))

    def append(self, record: dict) -> None:
        line = _line(record)
        try:
            with open(self.path, "a") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            if full := disk_full(self.path, len(line.encode()), e):
                raise full from None
            raise
