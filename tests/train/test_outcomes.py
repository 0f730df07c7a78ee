"""The stalled outcome: judged against the data's unigram level, written to summary.json, old summaries re-judged."""

import math

import pytest

from normjax.io import WorkdirError
from normjax.train import records
from normjax.train.config_io import parse
from normjax.train.job import finished_summary
from normjax.train.loop import run_job
from normjax.train.outcomes import STALL_FRACTION, classify, stall_level
from normjax.train.sweep import format_table


def test_classify_against_the_stall_level():
    h = 4.0
    level = stall_level(h)
    assert level == pytest.approx((1 - STALL_FRACTION) * h)
    assert classify(False, level - 1e-6, h) == "ok"
    assert classify(False, level, h) == "stalled"
    assert classify(False, h + 0.5, h) == "stalled"  # worse than the frequencies: stalled, not ok
    assert classify(True, 1.0, h) == "diverged"
    assert classify(False, math.nan, h) == "diverged"
    with pytest.raises(ValueError, match="valid/nll"):
        classify(False, None, h)


def _old(path, **changes):
    """Makes `path`/summary.json look like one written before the stalled outcome existed."""
    summary = records.read_json(str(path / "summary.json"))
    for key in ("unigram_nll", "stall_nll"):
        summary.pop(key)
    records.write_json(str(path / "summary.json"), summary | changes)
    return summary


def test_summary_carries_the_unigram_level_and_old_summaries_are_rejudged(tmp_path, tiny, caplog):
    run = parse(tiny(train__num_steps=10, train__eval_every=10, train__checkpoint_every=10, train__bleu_examples=0))
    summary = run_job(run, str(tmp_path), progress=False)
    assert summary["unigram_nll"] > 0 and summary["stall_nll"] == pytest.approx(stall_level(summary["unigram_nll"]))
    want = classify(False, summary["final"]["valid/nll"], summary["unigram_nll"])
    assert summary["outcome"] == want
    # an old summary that called the run "ok" is re-judged from its final nll, with a warning, and rewritten
    _old(tmp_path, outcome="ok")
    assert finished_summary(str(tmp_path), run)["outcome"] == want
    assert "predates the 'stalled' outcome" in caplog.text
    assert records.read_json(str(tmp_path / "summary.json"))["unigram_nll"] == pytest.approx(summary["unigram_nll"])
    # without a final valid nll there is nothing to judge: refused, naming the file
    old = _old(tmp_path, outcome="ok")
    records.write_json(str(tmp_path / "summary.json"), old | {"final": {}})
    with pytest.raises(WorkdirError, match="summary.json predates"):
        finished_summary(str(tmp_path), run)


def test_format_table_names_the_unigram_level():
    summary = {"outcome": "stalled", "steps": 5, "final": {"valid/nll": 4.0}, "unigram_nll": 4.2, "stall_nll": 3.78}
    result = {
        "runs": [{"name": "a", "group": "sgd", "overrides": {"train.lr": 0.1}, "status": "done", "summary": summary}]
    }
    lines = format_table(result).splitlines()
    assert lines[0].split()[:3] == ["grid", "lr", "outcome"] and lines[1].split()[:3] == ["sgd", "0.1", "stalled"]
    assert lines[-1].startswith("unigram level H = 4.200 (stalled: valid_nll >= 3.780)")
