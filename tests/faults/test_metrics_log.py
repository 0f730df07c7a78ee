"""Issue 12, item 3: a damaged metrics.jsonl never loses intact records and never leaves silent gaps."""

import json

import pytest
from faults.fault_runs import assert_same_run, train

from normjax.io import WorkdirError


def _lines(workdir) -> list[str]:
    return (workdir / "metrics.jsonl").read_text().splitlines(keepends=True)


def _write(workdir, lines) -> None:
    (workdir / "metrics.jsonl").write_text("".join(lines))


def test_torn_last_line_is_repaired(killed, reference):
    with open(killed / "metrics.jsonl", "a") as f:
        f.write('{"step": 40, "train/lo')  # the process died while appending
    train(killed)
    assert_same_run(killed, reference)


def _garbage_line(lines):
    return lines[:2] + ["garbage\n"] + lines[2:]


def _blank_line(lines):
    return lines[:2] + ["\n"] + lines[2:]


def _not_a_record(lines):
    return lines[:2] + ['{"no_step": 1}\n'] + lines[2:]


def _cut(lines):  # the record of step 10 deleted
    return lines[:1] + lines[2:]


def _deleted(lines):
    return []


def _two_writers(lines):  # a second process started over in the same folder
    return lines + lines


def _torn_then_more(lines):  # a torn line is only repairable at the end
    return lines[:2] + [lines[2][:10] + "\n"] + lines[3:]


DAMAGE = {
    _garbage_line: r"metrics.jsonl:3: not a metrics record \(b'garbage'\)",
    _blank_line: r"metrics.jsonl:3: not a metrics record",
    _not_a_record: r"metrics.jsonl:3: not a metrics record",
    _torn_then_more: r"metrics.jsonl:3: not a metrics record",
    _cut: r"metrics.jsonl:2: step 20 where step 10 was expected \(the log was cut",
    _deleted: r"metrics.jsonl is missing or empty but the run needs records up to step 20",
    _two_writers: r"metrics.jsonl:5: step 0 again or out of order \(two processes",
}


@pytest.mark.parametrize("damage", DAMAGE, ids=[d.__name__.strip("_") for d in DAMAGE])
def test_damaged_log_stops_the_run_and_keeps_the_file(killed, reference, damage):
    damaged = damage(_lines(killed))
    _write(killed, damaged)
    with pytest.raises(WorkdirError, match=DAMAGE[damage]):
        train(killed)
    assert _lines(killed) == damaged  # nothing deleted


@pytest.mark.parametrize("damage", [_cut, _deleted, _garbage_line], ids=["cut", "deleted", "garbage_line"])
def test_finished_run_with_a_damaged_log_is_an_error(finished, damage):
    """A finished run is read, not retrained: its log must hold every record up to its last step."""
    _write(finished, damage(_lines(finished)))
    with pytest.raises(WorkdirError, match=r"metrics.jsonl(:\d+: (step|not)| is missing or empty but the run needs)"):
        train(finished)


def test_force_retrains_a_damaged_run(killed, reference):
    _write(killed, _garbage_line(_lines(killed)))
    train(killed, force=True)  # the way out the message names
    assert_same_run(killed, reference)


def test_log_deleted_without_checkpoints_retrains_from_scratch(killed, reference):
    (killed / "metrics.jsonl").unlink()
    for step in ("10", "20"):
        (killed / "checkpoints" / step / "normjax_sha256.json").unlink()  # no intact checkpoint either
    train(killed)
    assert_same_run(killed, reference)
    assert [json.loads(line)["step"] for line in _lines(killed)] == [0, 10, 20, 30]


def test_finished_diverged_run_passes_the_log_check(tmp_path):
    """A run that diverged between record points logs its last step off the grid: that is a whole log."""
    config = dict(train__divergence_loss=0.01, train__divergence_patience=3, train__divergence_check_every=7)
    summary = train(tmp_path, **config)
    assert summary["outcome"] == "diverged" and summary["steps"] == 7
    assert train(tmp_path, **config) == summary  # skipped as finished
