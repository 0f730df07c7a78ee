"""Issue 25, item 8: the files results are built from carry a checksum; an altered or ill-formed one is set aside
and recomputed, never used, and the report refuses an altered results.json."""

import json
import logging
import types

import pytest
from faults.fault_runs import assert_same_run, interrupted_study, train

from normjax import io, studies
from normjax.report import CLAIMS, verdict_row
from normjax.studies import runner
from normjax.studies.report import UNVERIFIED as REPORT_UNVERIFIED
from normjax.studies.report import build_report
from normjax.train import records

CALLS = []


def _compute(config, study):
    CALLS.append(1)
    return {"v": study.cached("piece", lambda: {"v": 3 * config["a"]})["v"]}


def _study(workdir):
    return runner.run_study("toy", str(workdir), {"a": 1}, _compute, lambda results, study: [])


def _edit(path, edit) -> None:
    """A hand edit of a JSON file: valid JSON, other numbers, the checksum left as it was."""
    with open(path) as f:
        content = json.load(f)
    edit(content)
    with open(path, "w") as f:
        json.dump(content, f)


def test_written_files_carry_a_checksum(tmp_path):
    io.write_json(str(tmp_path / "a.json"), {"x": 1.5, "y": [1, None]})
    raw = json.loads((tmp_path / "a.json").read_text())
    assert raw[io.CHECKSUM_KEY] == io.checksum({"x": 1.5, "y": [1, None]})
    assert io.read_checked(str(tmp_path / "a.json")) == ({"x": 1.5, "y": [1, None]}, True)


def test_edited_results_json_is_set_aside_and_recomputed(tmp_path, caplog):
    _study(tmp_path)
    _edit(tmp_path / "toy" / "results.json", lambda c: c["results"].update(v=4))
    with caplog.at_level(logging.WARNING):
        assert _study(tmp_path)["results"] == {"v": 3}
    assert "toy/results.json does not match the checksum written with it" in caplog.text
    assert json.loads((tmp_path / "toy" / "results.json.rejected").read_text())["results"] == {"v": 4}  # kept


@pytest.mark.parametrize(
    "content", ["{}", "[]", '{"piece": {"v": 7}}', json.dumps(io.with_checksum({"v": 3}))], ids=str
)
def test_ill_formed_or_unverified_piece_is_set_aside_and_recomputed(tmp_path, caplog, content):
    partial = interrupted_study(tmp_path, {"a": 1}, _compute)
    (partial / "piece.json").write_text(content)
    with caplog.at_level(logging.WARNING):
        assert _study(tmp_path)["results"] == {"v": 3}
    assert "partial/piece.json is not a cached piece" in caplog.text
    assert "set aside as piece.json.rejected" in caplog.text


def test_edited_piece_is_set_aside_and_recomputed(tmp_path, caplog):
    partial = interrupted_study(tmp_path, {"a": 1}, _compute)
    _edit(partial / "piece.json", lambda c: c["piece"].update(v=4))
    with caplog.at_level(logging.WARNING):
        assert _study(tmp_path)["results"] == {"v": 3}
    assert "partial/piece.json does not match the checksum" in caplog.text


def test_intact_piece_is_reused(tmp_path):
    interrupted_study(tmp_path, {"a": 1}, lambda config, study: study.cached("piece", lambda: {"v": 5}))
    assert _study(tmp_path)["results"] == {"v": 5}  # the cached piece, not 3 * a


def test_finished_study_folder_keeps_no_lock_or_partial(tmp_path):
    _study(tmp_path)
    assert sorted(p.name for p in (tmp_path / "toy").iterdir()) == ["results.json"]
    CALLS.clear()
    assert _study(tmp_path)["results"] == {"v": 3} and not CALLS  # still finished


def test_results_json_stripped_of_its_checksum_is_set_aside_and_recomputed(tmp_path, caplog):
    """The current code writes every results.json with its checksum: one without it, whose config._code is the
    current code's, was edited (here: a number changed and the checksum dropped) and is never reused."""
    _study(tmp_path)
    path = tmp_path / "toy" / "results.json"
    _edit(path, lambda c: (c.pop(io.CHECKSUM_KEY), c["results"].update(v=99)))
    CALLS.clear()
    with caplog.at_level(logging.WARNING):
        assert _study(tmp_path)["results"] == {"v": 3}
    assert CALLS and "has no checksum, but its config._code" in caplog.text
    assert (tmp_path / "toy" / "results.json.rejected").exists()


def test_results_json_of_an_older_normjax_is_read_with_one_note_and_recomputed(tmp_path, caplog, monkeypatch):
    """An older normjax's results.json (no checksum, other code) is read unverified, said once, and computed
    again because its code differs."""
    monkeypatch.setattr(io, "_noted_unverified", set())
    _study(tmp_path)
    path = tmp_path / "toy" / "results.json"
    _edit(path, lambda c: (c.pop(io.CHECKSUM_KEY), c["config"].update(_code="older")))
    CALLS.clear()
    with caplog.at_level(logging.WARNING):
        assert _study(tmp_path)["results"] == {"v": 3}
    assert CALLS and caplog.text.count("has no checksum (written by an older normjax): read unverified") == 1
    assert "computed by other code" in caplog.text


@pytest.fixture
def rules(monkeypatch):
    """Study 'alpha' whose rule reads results["x"] as a number; its sweep trains before its analysis (the report
    reads its sweep.json's run times, as warmup_ablation's)."""
    rule = lambda r: [verdict_row(next(iter(CLAIMS)), "", f"{float(r['x'])}", "holds", "")]
    measure = types.ModuleType("alpha")
    measure.compute = _compute  # its code fingerprint: this file's
    module = types.ModuleType("alpha")
    fake = studies.Study("alpha", measure, module, rule, claims=tuple(CLAIMS), sweep_before_compute=True)
    monkeypatch.setitem(studies.BY_NAME, "alpha", fake)


def _results(tmp_path, x):
    io.write_json(str(tmp_path / "alpha" / "results.json"), {"experiment": "alpha", "config": {}, "results": {"x": x}})
    return tmp_path / "alpha" / "results.json"


def test_report_refuses_an_edited_results_json(tmp_path, rules):
    path = _results(tmp_path, 1.0)
    build_report(str(tmp_path))
    _edit(path, lambda c: c["results"].update(x=2.0))
    with pytest.raises(io.ChecksumError, match=rf"^{path} does not match the checksum.*rerun that study with --force$"):
        build_report(str(tmp_path))


def test_report_names_a_text_where_a_number_belongs(tmp_path, rules):
    path = _results(tmp_path, "abc")
    with pytest.raises(io.CorruptFileError, match=rf"^{path}: the alpha rules cannot read these results"):
        build_report(str(tmp_path))


def test_edited_summary_is_set_aside_and_the_run_resumed(killed, reference, caplog):
    train(killed)  # finished
    _edit(killed / "summary.json", lambda c: c["final"].update({"valid/nll": 0.01}))
    with caplog.at_level(logging.WARNING):
        train(killed)  # resumed from checkpoint 20
    assert "summary.json does not match the checksum" in caplog.text
    assert (killed / "summary.json.rejected").exists()
    assert_same_run(killed, reference)


def test_summary_with_a_text_for_a_number_is_set_aside(killed, reference, caplog):
    summary = io.read_json(str(reference / "summary.json"))
    summary["final"]["valid/nll"] = "low"
    io.write_json(str(killed / "summary.json"), summary)  # its checksum holds: the structure does not
    with caplog.at_level(logging.WARNING):
        train(killed)
    assert "final.valid/nll='low' is not a number" in caplog.text
    assert_same_run(killed, reference)


def test_edited_metrics_record_sets_the_run_aside_and_retrains_it(finished, reference, caplog):
    lines = (finished / "metrics.jsonl").read_text().splitlines()
    record = json.loads(lines[1])
    record["valid/nll"] += 0.5
    lines[1] = json.dumps(record)
    (finished / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(io.ChecksumError, match=r"metrics.jsonl:2 does not match the checksum"):
        records.read_jsonl(str(finished / "metrics.jsonl"))
    with caplog.at_level(logging.WARNING):
        train(finished)  # trained again from step 0
    for name in ("metrics.jsonl", "summary.json", "checkpoints"):
        assert (finished / f"{name}.rejected").exists(), name
    assert_same_run(finished, reference)


def _stripped(path, code: str) -> None:
    """results.json without its checksum, as `code` would have written it."""
    _edit(path, lambda c: (c.pop(io.CHECKSUM_KEY), c["config"].update(_code=code), c["results"].update(x=2.0)))


def test_report_refuses_stripped_results_of_the_current_code(tmp_path, rules):
    """Before: read 'unverified' with one stderr line blaming an older normjax, and used."""
    path = _results(tmp_path, 1.0)
    _stripped(path, runner.code_fingerprint(_compute))
    with pytest.raises(io.ChecksumError, match=rf"^{path} has no checksum, but its config._code .* --force$"):
        build_report(str(tmp_path))
    assert not (tmp_path / "REPORT.md").exists()


def test_report_names_an_older_normjax_results_in_its_header_and_every_row(tmp_path, rules):
    """Before: REPORT.md said nothing of it."""
    _stripped(_results(tmp_path, 1.0), "0123456789abcdef")
    text = (tmp_path / "REPORT.md").read_text() if build_report(str(tmp_path)) else ""
    header = text.split("## Summary")[0]
    assert "**Unverified results** (no checksum: an older normjax's files): alpha." in header
    rows = [line for line in text.splitlines() if "2.0" in line and ("(alpha)" in line or line.startswith("- **"))]
    assert len(rows) >= 3 and all(REPORT_UNVERIFIED in row for row in rows), rows  # summary, verdict table, section


@pytest.mark.parametrize(
    "content", ["[1, 2]", '{"runs": {"a": 1}}', '{"runs": [{"summary": {"wall_time_s": "soon"}}]}', "{oops", "dir"]
)
def test_report_names_a_damaged_sweep_json(tmp_path, rules, content):
    """Before: AttributeError / ValueError tracebacks (a damaged sweep.json beside a results.json)."""
    path = _results(tmp_path, 1.0).parent / "sweep.json"
    path.mkdir() if content == "dir" else path.write_text(content)
    with pytest.raises(io.CorruptFileError, match=rf"^{path} (is not a sweep's record|is corrupt|is a folder)") as e:
        build_report(str(tmp_path))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "field", [{"experiment": [1]}, {"figures": 5}, {"figures": [1]}, {"machine": [1]}, {"wall_time_s": "x"}], ids=str
)
def test_report_names_a_results_field_of_the_wrong_kind(tmp_path, rules, field):
    """A hand-made results.json (its checksum holds). Before: TypeError / AttributeError tracebacks."""
    path = _results(tmp_path, 1.0)
    io.write_json(str(path), io.read_json(str(path)) | field)
    key = next(iter(field))
    with pytest.raises(io.CorruptFileError, match=rf"^{path} is not a study's results: {key}="):
        build_report(str(tmp_path))


def test_report_names_a_results_json_that_is_a_folder(tmp_path, rules):
    """Before: IsADirectoryError."""
    (tmp_path / "alpha" / "results.json").mkdir(parents=True)
    with pytest.raises(io.CorruptFileError, match="results.json is a folder, not a JSON file"):
        build_report(str(tmp_path))
