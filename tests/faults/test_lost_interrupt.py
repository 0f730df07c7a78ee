"""A Ctrl-C whose KeyboardInterrupt is lost (raised inside a finalizer, printed as "Exception ignored") still
stops the study after its current piece and ends the command as interrupted."""

import contextlib
import json
import signal

import pytest

from normjax.experiments.common import ctrl_c_kept
from normjax.studies import runner
from normjax.train import loop


def _ctrl_c_lost_in_a_finalizer():
    with contextlib.suppress(KeyboardInterrupt):  # what Python does with one raised inside a gc callback or __del__
        signal.raise_signal(signal.SIGINT)


def test_a_block_that_returns_after_a_lost_ctrl_c_ends_interrupted():
    with pytest.raises(KeyboardInterrupt), ctrl_c_kept():
        _ctrl_c_lost_in_a_finalizer()
    assert not loop.STOP.is_set()  # the next command of this process starts clean
    with ctrl_c_kept():
        pass  # no Ctrl-C: no interrupt


def test_a_study_stops_after_the_piece_that_saw_it_and_keeps_it(tmp_path):
    study = runner.StudyDir(str(tmp_path), "toy", {"n": 3}, "code")
    study.open_partial()
    computed = []

    def piece(i):
        computed.append(i)
        if i == 1:
            _ctrl_c_lost_in_a_finalizer()
        return {"i": i}

    with pytest.raises(KeyboardInterrupt), ctrl_c_kept():
        for i in range(3):
            study.cached(f"p{i}", lambda i=i: piece(i))
    assert computed == [0, 1]  # piece 2 never started
    kept = json.loads((tmp_path / "toy" / "partial" / "p1.json").read_text())
    assert kept["piece"] == {"i": 1}
