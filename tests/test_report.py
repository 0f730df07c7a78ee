"""The report builder: rules judge results.json when the report is built; one verdict per claim, with its rows."""

import dataclasses
import os
import pathlib
import subprocess
import sys
import types

import pytest

from normjax import studies
from normjax.io import CorruptFileError, write_json
from normjax.report import CLAIMS, verdict_row
from normjax.report.claims import BY_ID, CONSTRUCTION, INCONCLUSIVE, NOT_REPRODUCED
from normjax.report.rules import Threshold, combine, mean_ci
from normjax.studies import claims_doc, runner
from normjax.studies.hidden_norms import measure as hidden_norms
from normjax.studies.report import build_report

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture
def fake_rules(monkeypatch):
    """Studies 'alpha' and 'beta' whose rules return the rows stored in their results (a stand-in measurement)."""
    module = types.ModuleType("fake_rules")
    module.verdicts = lambda results: results["rows"]
    for name in ("alpha", "beta"):
        rules = lambda results: module.verdicts(results)  # noqa: B023 (the test rewrites module.verdicts)
        fake = studies.Study(name, types.ModuleType(name), types.ModuleType(name), rules, claims=CLAIMS)
        monkeypatch.setitem(studies.BY_NAME, name, fake)
    return module


def _study(tmp_path, name, rows, figures=(), provenance=None, results=None):
    """A results.json of `name` whose rules return `rows`; of `figures` the PNGs are written, the rest not."""
    os.makedirs(tmp_path / name, exist_ok=True)
    for figure in figures:
        if figure.endswith(".png"):
            (tmp_path / name / figure).write_bytes(b"png")
    write_json(
        str(tmp_path / name / "results.json"),
        {
            "experiment": name,
            "config": {},
            "provenance": {"preset": "quick", "differs": []} if provenance is None else provenance,
            "wall_time_s": 1.0,
            "figures": list(figures),
            "results": {"rows": rows, "discussion": f"{name} discussion."} | (results or {}),
        },
    )


def _report(tmp_path) -> str:
    with open(build_report(str(tmp_path))) as f:
        return f.read()


def test_report_has_a_row_per_claim_and_keeps_negative_verdicts(tmp_path, fake_rules):
    _study(
        tmp_path,
        "alpha",
        [
            verdict_row(
                "X5",
                "slope -1/2 for Pre-LN",
                "slope -0.12 +- 0.02",
                "does not hold",
                "rule: interval inside [-0.6, -0.4]",
                "fit.png",
                key="slope -0.12 [-0.16, -0.08] (3 seeds)",
                slope=-0.12,
            ),
            verdict_row("S4", "grows", "ratio 19", "holds", "rule: r^2 >= 0.9"),
            verdict_row("X1", "wiring", "exact", CONSTRUCTION, "rebuilt from the streams"),
        ],
        figures=["fit.png", "fit.pdf"],
    )
    _study(
        tmp_path,
        "beta",
        [verdict_row("X7", "BLEU 8 vs 34", "no IWSLT files", "not testable at this scale", "needs the real data")],
    )
    text = _report(tmp_path)
    for claim in CLAIMS:
        assert f"| {claim}: " in text and f"\n| {claim} | " in text, claim  # its section row and its summary row
    x5 = next(line for line in text.splitlines() if line.startswith("| X5: "))
    assert "**does not hold**" in x5 and "slope -0.12 +- 0.02 (alpha)" in x5
    assert "[fit.png](alpha/fit.png)" in x5
    assert (
        "| X5 | paper, in its setting | **does not hold** | does not hold: slope -0.12 [-0.16, -0.08] (3 seeds) "
        "(alpha) |" in text
    )
    assert (
        f"{len(CLAIMS)} claims; empirical: 1 holds, 1 does not hold, 1 not testable at this scale; 1 verified by "
        f"construction; {len(CLAIMS) - 4} not run" in text
    )
    assert "Preset :quick." in text
    assert "![alpha: fit.png](alpha/fit.png)" in text and "fit.pdf)" not in text
    assert "beta discussion." in text


def test_rules_run_when_the_report_is_built_not_when_measured(tmp_path, fake_rules):
    """Rewording a rule changes the verdict of an old results folder without recomputing anything."""
    _study(tmp_path, "alpha", [verdict_row("S4", "grows", "ratio 19", "holds", "old rule")])
    assert "| S4 | folk claim | holds |" in _report(tmp_path)
    fake_rules.verdicts = lambda results: [
        r | {"verdict": "partly holds", "reason": "new rule"} for r in results["rows"]
    ]
    text = _report(tmp_path)
    assert "| S4 | folk claim | partly holds |" in text and "new rule" in text


def test_a_run_that_is_not_its_preset_is_marked_with_the_differing_keys(tmp_path, fake_rules):
    differs = {"preset": "quick", "differs": ["train.num_steps", "seed"]}
    _study(tmp_path, "alpha", [verdict_row("S4", "grows", "ratio 19", "holds", "r")], provenance=differs)
    _study(tmp_path, "beta", [verdict_row("S6", "same", "1.0", "holds", "r")], provenance={})
    text = _report(tmp_path)
    assert "| S4 | folk claim | holds (*differs from :quick in train.num_steps, seed*) |" in text
    assert "| S6 | folk claim | holds (*run without a recorded preset*) (*machine-dependent: CPU time" in text


def test_results_the_current_rules_cannot_read_are_an_error_naming_the_file(tmp_path):
    """Results measured by older code (a key the rules need is missing) are refused, never judged wrongly."""
    write_json(
        str(tmp_path / "hidden_norms" / "results.json"),
        {"experiment": "hidden_norms", "config": {}, "results": {"runs": {}}},
    )
    with pytest.raises(CorruptFileError, match=r"hidden_norms/results.json: the hidden_norms rules cannot read"):
        build_report(str(tmp_path))
    assert not (tmp_path / "REPORT.md").exists()


def test_verdict_rows_are_validated():
    with pytest.raises(ValueError, match="unknown claim 'Z9'"):
        verdict_row("Z9", "p", "m", "holds", "r")
    with pytest.raises(ValueError, match="verdict 'probably'"):
        verdict_row("S1", "p", "m", "probably", "r")


@pytest.mark.parametrize(
    "row, match",
    [
        ({"claim": "S6", "verdict": "holds"}, "verdict row 0 is invalid"),  # fields missing
        (verdict_row("S6", "p", "m", "holds", "r") | {"verdict": "mostly"}, "verdict row 0 is invalid"),
        (verdict_row("S6", "p", "m", "holds", "r") | {"claim": "Z9"}, "verdict row 0 is invalid"),
    ],
)
def test_an_invalid_verdict_row_names_its_file_instead_of_dropping_out(tmp_path, fake_rules, row, match):
    """A row the report cannot place used to vanish from REPORT.md; now it is an error naming the file."""
    _study(tmp_path, "alpha", [row])
    with pytest.raises(CorruptFileError, match=rf"alpha/results.json: alpha {match}"):
        build_report(str(tmp_path))
    assert not (tmp_path / "REPORT.md").exists()


def test_report_cli_names_a_truncated_results_file_in_one_line(tmp_path):
    _study(tmp_path, "cost", [])
    path = tmp_path / "cost" / "results.json"
    path.write_text(path.read_text()[:40])
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "report.py"), f"--workdir={tmp_path}"],
        capture_output=True,
        text=True,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: {path} is corrupt") and len(proc.stderr.strip().splitlines()) == 1


def test_the_cache_fingerprint_covers_library_code_but_not_rules_or_sibling_studies():
    files = {os.path.relpath(f, ROOT / "normjax") for f in runner.code_files(hidden_norms.compute)}
    assert {"model.py", "init.py", "jacobian/traced.py", "studies/hidden_norms/measure.py", "studies/seeds.py"} <= files
    assert not {f for f in files if f.startswith("train/")}  # imported by the package, not used by this study
    assert not {f for f in files if f.endswith(("verdicts.py", "config.py")) or f.startswith("report/")}
    for study in studies.STUDIES:
        files = {os.path.relpath(f, ROOT / "normjax" / "studies") for f in runner.code_files(study.compute)}
        siblings = {f for f in files if f.split(os.sep)[0] in studies.BY_NAME and f.split(os.sep)[0] != study.name}
        assert not siblings, f"{study.name}'s cache key covers sibling studies {siblings}"


def test_a_studys_figures_module_is_its_plot_and_outside_its_cache_key():
    with_figures = [study for study in studies.STUDIES if study.figures is not None]
    assert {study.name for study in with_figures} >= {"deep_training", "trained_layers"}
    for study in with_figures:
        assert study.plot is study.figures.plot
        assert study.figures.__file__ not in runner.code_files(study.compute), study.name


def test_docs_claims_md_is_generated_from_the_registry_and_rule_thresholds():
    with open(claims_doc.DOC) as f:
        assert f.read() == claims_doc.render(), "docs/claims.md is stale: run python -m normjax.studies.claims_doc"
    assert all(f"### {claim}: " in claims_doc.render() for claim in CLAIMS)


@pytest.mark.parametrize("bad", ["nan", "inf", "-5"])
def test_report_cli_refuses_a_wall_time_that_is_not_a_duration(tmp_path, bad):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "report.py"), f"--workdir={tmp_path}", f"--wall_time_s={bad}"],
        capture_output=True,
        text=True,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode != 0 and "--wall_time_s" in proc.stderr and not (tmp_path / "REPORT.md").exists()


def test_a_claim_gets_one_verdict_from_its_rows_across_studies(tmp_path, fake_rules):
    """S1 holds in one study and not in another: one row for S1, 'partly holds', counted once."""
    _study(tmp_path, "alpha", [verdict_row("S1", "p", "grows", "holds", "r", key="slope +0.4")])
    _study(tmp_path, "beta", [verdict_row("S1", "p", "flat", "does not hold", "r", key="e 0.02")])
    text = _report(tmp_path)
    assert "| S1 | folk claim | partly holds | holds: slope +0.4 (alpha); does not hold: e 0.02 (beta) |" in text
    assert f"{len(CLAIMS)} claims; empirical: 1 partly holds; 0 verified by construction" in text
    assert "| S1: " in text and "| S1 (evidence 2) |" in text  # the rows stay as evidence under the claim


def test_a_claim_whose_interval_straddles_its_threshold_is_inconclusive(tmp_path, fake_rules):
    """A rule on the interval of the stored values: mean 0.42 above 0.2, interval across it -> inconclusive."""
    fake_rules.verdicts = lambda results: [
        verdict_row("D2", "grows", "slope", combine([mean_ci(results["slopes"]).above(0.2)]), "interval above 0.2")
    ]
    _study(tmp_path, "alpha", [], results={"slopes": [-0.2, 0.35, 1.1]})
    _study(tmp_path, "beta", [], results={"slopes": [2.0, 2.1, 2.2]})
    fake_rules.verdicts = lambda results: [
        verdict_row(
            "D2" if max(results["slopes"]) < 2 else "S4", "grows", "slope",
            combine([mean_ci(results["slopes"]).above(0.2)]), "interval above 0.2",
        )
    ]  # fmt: skip
    text = _report(tmp_path)
    assert f"| D2 | {BY_ID['D2'].scope_text} | {INCONCLUSIVE} |" in text and "| S4 | folk claim | holds |" in text


@pytest.fixture
def thresholded(monkeypatch):
    """A study 'gamma' whose rule reads its THRESHOLDS when it runs: CUT decides, UNUSED reaches nothing."""
    table = {
        "CUT": Threshold(1.0, "a test cut"),
        "UNUSED": Threshold(5.0, "read by no rule"),
        "ZERO": Threshold(0.0, "", unit=0.2),
        "FRACTION": Threshold(0.9, "", bounded=True),
    }

    def rules(results):
        est = mean_ci(results["values"])
        cut = table["CUT"].value
        return [verdict_row("R6", "above CUT", est.text(), combine([est.above(cut)]), f"interval above {cut:g}")]

    fake = studies.Study("gamma", types.ModuleType("g"), types.ModuleType("g"), rules, table, claims=("R6",))
    monkeypatch.setitem(studies.BY_NAME, "gamma", fake)
    return table


def test_sensitivity_table_lists_what_flips_when_a_threshold_moves(tmp_path, thresholded):
    """Values 1.1-1.3: above 1.0 (holds); at 1.25 the interval straddles (inconclusive); at 0.75 still holds."""
    _study(tmp_path, "gamma", [], results={"values": [1.15, 1.2, 1.25]})
    text = _report(tmp_path)
    # +-50% of 1.0: at 0.5 it still holds; at 1.5 the interval [1.08, 1.32] lies below: contradicted, and R6 is
    # measured outside its paper's setting, so the claim reads "not reproduced", not "does not hold"
    assert (
        "| `CUT` (gamma) | 1 | relative | to 0.5: no flip | to 1.5: R6 (gamma): holds -> does not hold; claim R6: "
        f"holds -> {NOT_REPRODUCED} |" in text
    )
    assert "| `UNUSED` (gamma) | 5 | relative | to 2.5: no row changes | to 7.5: no row changes |" in text
    assert "| `ZERO` (gamma) | 0 | additive, unit 0.2 | to -0.1: no row changes | to 0.1: no row changes |" in text
    assert "| `FRACTION` (gamma) | 0.9 | complement 1 - value | to 0.95: no row changes | to 0.85:" in text
    # the nearest flip: +12.5% (1.125) already puts the cut inside the interval
    assert f"| R6 | holds | `CUT` (gamma) +12.5%: {INCONCLUSIVE} |" in text
    assert thresholded["CUT"].value == 1.0  # restored after the table


def test_header_wall_time_is_the_sum_of_the_studies_with_their_sweeps(tmp_path, fake_rules, monkeypatch):
    _study(tmp_path, "alpha", [verdict_row("S4", "grows", "ratio 19", "holds", "r")])
    _study(tmp_path, "beta", [verdict_row("S6", "same", "1.0", "holds", "r")])
    for name in ("alpha", "beta"):
        write_json(str(tmp_path / name / "sweep.json"), {"runs": [{"summary": {"wall_time_s": 58.0}}, {"summary": {}}]})
    # beta trains its sweep before its analysis (warmup_ablation's way); alpha's compute runs its own (answer's):
    # its 58 s are inside its 1 s wall time here, so they are not added again
    monkeypatch.setitem(
        studies.BY_NAME, "beta", dataclasses.replace(studies.BY_NAME["beta"], sweep_before_compute=True)
    )
    text = _report(tmp_path)
    assert "1.0 min of study time, each sweep's runs summed over its workers" in text  # 1 + 1 + 58 s
    assert "Time 59 s (1 s analysis + 58 s of sweep runs, summed over its workers)" in text
    assert "Time 1 s on" in text  # alpha


def test_results_json_lists_only_figures_that_exist_and_records_provenance(tmp_path):
    study = runner.StudyDir(str(tmp_path), "alpha", {"train": {"num_steps": 7}})
    os.makedirs(study.path)
    (tmp_path / "alpha" / "fit.png").write_bytes(b"png")
    saved = study.save(
        {}, [study.figure_stem("fit") + ".png", study.figure_stem("fit") + ".pdf"], 1.0,
        {"preset": "quick", "differs": ["train.num_steps"]},
    )  # fmt: skip
    assert saved["figures"] == ["fit.png"]
    provenance = saved["provenance"]
    assert provenance["preset"] == "quick" and provenance["overrides"] == {"train.num_steps": 7}
    assert {"python", "jax", "flax", "numpy"} <= set(provenance["versions"])


def test_a_study_lead_section_comes_before_the_claim_tables(tmp_path, monkeypatch):
    """Study.lead (the answer to the report's title) is shown first, built from that study's results."""
    lead = lambda results: [f"| depth | pick |", "|---|---|", f"| 6 | {results['winner']} |"]  # noqa: F541
    fake = studies.Study("delta", types.ModuleType("d"), types.ModuleType("d"), lambda r: [], claims=(), lead=lead)
    monkeypatch.setitem(studies.BY_NAME, "delta", fake)
    _study(tmp_path, "delta", [], results={"winner": "pre"})
    text = _report(tmp_path)
    assert text.index("## Where should the norm sit? (from delta") < text.index("## Summary")
    assert "| 6 | pre |" in text.split("## Summary")[0]
