"""Issue 12, item 1: a damaged, stray or foreign checkpoint is never loaded silently."""

import logging
import os

import numpy as np
import pytest
from faults.fault_runs import assert_same_run, train

from normjax import io
from normjax.io import WorkdirError
from normjax.train.checkpoint import MANIFEST


def _largest_file(folder) -> str:
    files = [os.path.join(root, n) for root, _, names in os.walk(folder) for n in names if n != MANIFEST]
    return max(files, key=os.path.getsize)


def _random_bytes(folder):
    path = _largest_file(folder)
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        f.write(np.random.default_rng(0).bytes(64))


def _flipped_bit(folder):
    path = _largest_file(folder)
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        byte = f.read(1)[0]
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte ^ 1]))


def _truncated(folder):
    path = _largest_file(folder)
    os.truncate(path, os.path.getsize(path) // 2)


def _manifest_missing(folder):  # killed after orbax committed the step, before its manifest was written
    os.remove(os.path.join(folder, MANIFEST))


def _file_deleted(folder):
    os.remove(_largest_file(folder))


DAMAGE = [_random_bytes, _flipped_bit, _truncated, _manifest_missing, _file_deleted]


@pytest.mark.parametrize("damage", DAMAGE, ids=[d.__name__.strip("_") for d in DAMAGE])
def test_damaged_latest_checkpoint_falls_back_to_the_intact_one(killed, reference, damage, caplog):
    damage(killed / "checkpoints" / "20")
    with caplog.at_level(logging.WARNING):
        train(killed)
    assert f"checkpoint {killed / 'checkpoints' / '20'} is not used" in caplog.text
    assert (killed / "checkpoints_rejected" / "20").is_dir()
    assert_same_run(killed, reference)  # resumed from step 10: the same records as the uninterrupted run


@pytest.mark.parametrize("content", [None, "junk"], ids=["empty", "with_a_file"])
def test_stray_step_folder_is_moved_aside(killed, reference, content, caplog):
    stray = killed / "checkpoints" / "999"
    stray.mkdir()
    if content:
        (stray / "x").write_text(content)
    with caplog.at_level(logging.WARNING):
        train(killed)
    assert "999 is not used: it has no checksum manifest" in caplog.text
    assert (killed / "checkpoints_rejected" / "999").is_dir() and not stray.exists()
    assert_same_run(killed, reference)


def test_no_intact_checkpoint_restarts_from_step_0(killed, reference, caplog):
    for step in ("10", "20"):
        _random_bytes(killed / "checkpoints" / step)
    with caplog.at_level(logging.WARNING):
        train(killed)
    assert caplog.text.count("is not used") == 2
    assert_same_run(killed, reference)
    assert sorted(os.listdir(killed / "checkpoints")) == ["10", "20"]  # written again, verified
    assert all((killed / "checkpoints" / s / MANIFEST).exists() for s in ("10", "20"))


def test_foreign_checkpoint_is_an_error_naming_it(killed):
    path = killed / "checkpoints" / "20" / MANIFEST
    io.write_json(str(path), io.read_json(str(path)) | {"fingerprint": "another-run"})  # written by another run
    with pytest.raises(WorkdirError, match=r"checkpoints/20 is a checkpoint of another config"):
        train(killed)
