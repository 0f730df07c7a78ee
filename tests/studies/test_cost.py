"""cost at a tiny size: results schema, the S6 row and its rule, exact parameter counts, a resumed run compiling
nothing."""

import platform

import ml_collections
import pytest

from normjax import studies
from normjax.report import CLAIMS, VERDICTS
from normjax.report.claims import INCONCLUSIVE
from normjax.studies import runner
from normjax.studies import schema as schemas
from normjax.studies.cost import config as presets
from normjax.studies.cost import measure as cost
from normjax.studies.judge import judge


def _tiny():
    c = ml_collections.ConfigDict()
    c.placements, c.reference = ("post", "pre"), "pre"
    c.vocab_size, c.d_model, c.num_heads, c.d_ff, c.num_layers = 31, 16, 2, 32, 2
    c.batch_size, c.seq_len = 2, 8
    c.warmup_steps, c.repeats, c.inner_steps = 1, 2, 2
    c.seed, c.num_seeds = 1, 3  # not seed 0: --config.seed=1 must work
    return c


def test_cost_smoke(tmp_path, monkeypatch):
    saved = runner.run_study("cost", str(tmp_path), _tiny(), cost.compute, cost.plot)
    results = saved["results"]
    assert (tmp_path / "cost" / "cost.png").exists()
    assert results["seeds"] == [1, 2, 3]
    assert results["host_memory_kept"] == (platform.libc_ver()[0] == "glibc")  # timed without page-fault churn
    runs = results["runs"]
    assert set(runs) == {"post", "pre"}
    for run in runs.values():
        assert len(run["cpu"]["s"]) == len(run["wall"]["s"]) == 6 and run["cpu"]["median"] > 0  # 3 seeds x 2 rounds
        assert len(run["cpu"]["seeds"]) == len(run["relative"]["time_seeds"]) == 3
        assert set(run["memory"]) == {"argument", "output", "alias", "temp", "total"} and run["memory"]["total"] > 0
    assert runs["pre"]["relative"]["time"] == 1.0 and runs["pre"]["relative"]["memory"] == 1.0
    assert runs["pre"]["relative"]["time_seeds"] == [1.0, 1.0, 1.0]
    # Same sublayers and norms per block: Pre-LN adds only its final LayerNorm (scale + bias of width d).
    assert runs["pre"]["num_params"] - runs["post"]["num_params"] == 2 * 16
    rows = judge("cost", results)
    assert [r["claim"] for r in rows] == ["S6"] and set(r["claim"] for r in rows) <= set(CLAIMS)
    assert all(r["verdict"] in VERDICTS for r in rows)
    # A study killed after its pieces were timed resumes from them: with all of them present nothing is compiled.
    killed = tmp_path / "killed"
    _run_killed_before_saving(killed, monkeypatch)
    monkeypatch.setattr(cost.Steps, "compiled", property(lambda self: (_ for _ in ()).throw(AssertionError)))
    again = runner.run_study("cost", str(killed), _tiny(), cost.compute, cost.plot)
    assert set(again["results"]["runs"]) == {"post", "pre"}


def _run_killed_before_saving(workdir, monkeypatch) -> None:
    """A cost run interrupted after every piece was computed, before results.json was written (pieces kept)."""

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(runner.StudyDir, "save", interrupted)
        with pytest.raises(KeyboardInterrupt):
            runner.run_study("cost", str(workdir), _tiny(), cost.compute, cost.plot)
    assert list((workdir / "cost" / "partial").glob("*.json")), "the interrupted run kept no pieces"


def test_pieces_timed_under_another_malloc_policy_are_not_reused(tmp_path, monkeypatch):
    _run_killed_before_saving(tmp_path, monkeypatch)  # then resumed by a process under the other malloc policy
    kept = cost.host_memory.keep_freed_memory()
    monkeypatch.setattr(cost.host_memory, "keep_freed_memory", lambda: not kept)
    rounds, time_round = [], cost.Steps.time_round
    monkeypatch.setattr(cost.Steps, "time_round", lambda self, s, r: rounds.append((s, r)) or time_round(self, s, r))
    again = runner.run_study("cost", str(tmp_path), _tiny(), cost.compute, cost.plot)["results"]
    assert again["host_memory_kept"] != kept
    assert len(rounds) == 6  # 3 seeds x 2 rounds, every one timed again


@pytest.mark.parametrize("preset", ["quick", "standard", "paper"])
def test_presets_are_valid_with_three_seeds_or_more(preset):
    config = presets.get_config(preset)
    schemas.validate(studies.get("cost"), config)
    assert config.num_seeds >= 3


def _synthetic(time_ratios, memory_ratio, num_seeds=None):
    """Results whose post/pre CPU-time ratio is `time_ratios` per seed and memory ratio `memory_ratio`."""

    def run(times, memory):
        relative = {"time": 1.0, "time_seeds": times, "wall_time": 1.0, "wall_time_seeds": times, "memory": memory}
        relative |= {"temp": memory, "params": 1.0, "flops": 1.0}
        return {"relative": relative, "cpu": {"median": 0.1}, "num_params": 100}

    return {
        "num_seeds": len(time_ratios) if num_seeds is None else num_seeds,
        "repeats": 3,
        "reference": "pre",
        "runs": {"post": run(time_ratios, memory_ratio), "pre": run([1.0] * len(time_ratios), 1.0)},
        "size": {"d_model": 16},
        "device": "cpu:0",
    }


def _verdict(results):
    (row,) = judge("cost", results)
    return row["verdict"]


def test_rule_clean_pass_and_failures():
    assert _verdict(_synthetic([0.98, 1.0, 1.02], 1.0)) == "holds"
    assert _verdict(_synthetic([0.98, 1.0, 1.02], 1.2)) == "partly holds"  # memory 20% apart
    assert _verdict(_synthetic([1.5, 1.6, 1.55], 1.2)) == "does not hold"


def test_rule_noisy_mean_passes_but_interval_straddles():
    # mean ratio 1.0 (inside [0.9, 1.1]), but the seeds spread it over about [0.75, 1.25]
    assert _verdict(_synthetic([0.9, 1.1, 1.0], 1.0)) == INCONCLUSIVE  # memory equal, time undecided


def test_rule_with_fewer_than_three_seeds_says_so():
    assert _verdict(_synthetic([0.98, 1.0], 1.0)) == "not testable at this scale"
