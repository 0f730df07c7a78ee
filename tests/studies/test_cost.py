"""cost at a tiny size: results schema, the S6 row, exact parameter counts, and a resumed run compiling nothing."""

import ml_collections

from normjax.report import CLAIMS, VERDICTS
from normjax.report.judge import judge
from normjax.studies import cost, runner


def _tiny():
    c = ml_collections.ConfigDict()
    c.placements, c.reference = ("post", "pre"), "pre"
    c.vocab_size, c.d_model, c.num_heads, c.d_ff, c.num_layers = 31, 16, 2, 32, 2
    c.batch_size, c.seq_len = 2, 8
    c.warmup_steps, c.repeats, c.inner_steps, c.seed = 1, 3, 2, 0
    return c


def test_cost_smoke(tmp_path, monkeypatch):
    saved = runner.run_study("cost", str(tmp_path), _tiny(), cost.compute, cost.plot)
    results = saved["results"]
    assert (tmp_path / "cost" / "cost.png").exists()
    runs = results["runs"]
    assert set(runs) == {"post", "pre"}
    for run in runs.values():
        assert len(run["cpu"]["s"]) == len(run["wall"]["s"]) == 3 and run["cpu"]["median"] > 0
        assert set(run["memory"]) == {"argument", "output", "alias", "temp", "total"} and run["memory"]["total"] > 0
    assert runs["pre"]["relative"]["time"] == 1.0 and runs["pre"]["relative"]["memory"] == 1.0
    # Same sublayers and norms per block: Pre-LN adds only its final LayerNorm (scale + bias of width d).
    assert runs["pre"]["num_params"] - runs["post"]["num_params"] == 2 * 16
    rows = judge("cost", results)
    assert [r["claim"] for r in rows] == ["S6"] and set(r["claim"] for r in rows) <= set(CLAIMS)
    assert all(r["verdict"] in VERDICTS for r in rows)
    # A killed study resumes from its cached pieces: with all of them present nothing is compiled.
    (tmp_path / "cost" / "results.json").unlink()
    monkeypatch.setattr(cost.Steps, "compiled", property(lambda self: (_ for _ in ()).throw(AssertionError)))
    again = runner.run_study("cost", str(tmp_path), _tiny(), cost.compute, cost.plot)
    assert again["results"]["runs"]["post"]["wall"] == runs["post"]["wall"]
