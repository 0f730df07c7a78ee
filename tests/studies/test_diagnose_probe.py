"""diagnose's probe: warnings fire exactly at their thresholds; a vanishing lr is never flagged; the sweep
validation reads outcomes (including old summaries) and counts hits and false alarms right."""

import json
import math
import os
import re

import pytest

from normjax import studies
from normjax.io import to_jsonable
from normjax.studies import schema as schemas
from normjax.studies.diagnose import config as presets
from normjax.studies.diagnose import probe as diagnose_probe
from normjax.studies.diagnose import validation as diagnose_validation
from normjax.train import job, parse, tasks
from normjax.train.config_io import ConfigError
from normjax.train.outcomes import stall_level

T = diagnose_probe.threshold_values()
SETUP = dict(task="synthetic", schedule="constant", optimizer="adam", peak_lr_reached=1.0)


def tiny_run(**train):
    """A 2-2 layer d=8 Post-LN model on a small synthetic task: compiles and steps in seconds."""
    return {
        "model": dict(
            arch="encoder_decoder", d_model=8, num_heads=2, d_ff=16, num_layers=2, placement="post", scan_layers=True
        ),
        "data": dict(task="synthetic", max_len=12, num_train=256, num_valid=32),
        "train": dict(
            schedule="constant", num_steps=100, batch_size=4, warmup_steps=0, lr=1e-3, log_every=10, bleu_examples=0
        )
        | train,
    }


def record(update=0.5, rms=(1.0, 1.2), bottom=(1.0, 0.9), top=(1.0, 1.0), diverged=None):
    """A probe record with the given per-step numbers (one stack)."""
    return {
        "num_steps": len(rms) - 1,
        "update": [0.0, update],
        "diverged_step": diverged,
        "stacks": {
            "decoder": {
                "ln_input_rms": list(rms),
                "path_ln_input_rms": list(rms),
                "grad_bottom": list(bottom),
                "grad_top": list(top),
            }
        },
        "setup": {"lr": 1e-3, "warmup_steps": 0},
    }


def test_no_warning_below_every_threshold():
    assert diagnose_probe.warnings(record(), T) == []


@pytest.mark.parametrize(
    "rec, words",
    [
        (record(update=T["update"]), "output moved"),
        (record(rms=(1.5, 1.5 * T["ln_growth"])), "norm inputs on the residual path grew"),
        (record(bottom=(1.0, 1.0 / T["grad_collapse"])), "gradient collapsed"),
        (record(bottom=(1.0, 1.0), top=(1.0, T["grad_collapse"])), "gradient collapsed"),  # relative to the top
        (record(diverged=1), "diverged at step 1"),
    ],
)
def test_each_warning_fires_at_its_threshold_with_the_numbers(rec, words):
    (warning,) = diagnose_probe.warnings(rec, T)
    assert words in warning and "lr 0.001, warmup 0" in warning


def test_norms_off_the_residual_path_do_not_count():
    """Pre-LN's norm inputs are the stream, which may grow: the residual path bypasses them (no '.post' site)."""
    rec = record(rms=(1.0, 100.0))
    rec["stacks"]["decoder"]["path_ln_input_rms"] = [0.0, 0.0]
    assert diagnose_probe.warnings(rec, T) == []
    sig = json.loads(json.dumps(to_jsonable(diagnose_probe.signals(rec))))  # as results.json holds it: nan -> None
    assert sig["stacks"]["decoder"]["ln_growth"] is None
    line = diagnose_probe.summary_line(rec | {"setup": rec["setup"] | SETUP, "wall_time_s": 1.0}, sig)
    assert "decoder: no norm on the residual path" in line


def test_a_uniform_gradient_drop_is_not_a_collapse():
    """The loss falling shrinks every layer's gradient alike: the bottom/top ratio, not the bottom alone, decides."""
    rec = record(bottom=(1.0, 0.01), top=(2.0, 0.02))
    assert diagnose_probe.signals(rec)["stacks"]["decoder"]["grad_collapse"] == pytest.approx(1.0)
    assert diagnose_probe.warnings(rec, T) == []


def test_run_config_picks_the_task_of_the_arch_and_names_a_bad_key():
    values = {k: v for k, v in tiny_run().items()}
    assert diagnose_probe.run_config(values | {"data": {"task": ""}}).data.task == "synthetic"
    decoder = values | {"model": values["model"] | {"arch": "decoder"}, "data": {"task": ""}}
    assert diagnose_probe.run_config(decoder).data.task == "bytes_lm"
    with pytest.raises(ConfigError, match="config.train.lrr"):
        diagnose_probe.run_config(values | {"train": {"lrr": 1.0}})


@pytest.fixture(scope="module")
def still():
    """3 probe steps at lr 1e-9: the parameters move by about 1e-9, so nothing can grow or collapse."""
    return diagnose_probe.probe(parse(tiny_run(lr=1e-9)), 3)


def test_probe_at_a_vanishing_lr_measures_no_change(still):
    assert still["step"] == [0, 1, 2, 3] and still["update"][0] == 0.0 and still["diverged_step"] is None
    assert max(still["update"]) < 1e-4
    for stack in ("encoder", "decoder"):
        sig = diagnose_probe.signals(still)["stacks"][stack]
        assert sig["ln_growth"] == pytest.approx(1.0, rel=1e-4)
        assert sig["grad_collapse"] == pytest.approx(1.0, rel=1e-2)  # gradients change with the batch only
    assert diagnose_probe.warnings(still, T) == []
    assert still["setup"]["peak_lr_reached"] == pytest.approx(1.0)
    assert "probe: 3 steps on synthetic at lr 1e-09" in diagnose_probe.summary_line(
        still, diagnose_probe.signals(still)
    )


def write_sweep(folder, cells):
    """A sweep folder as the sweep engine writes it: sweep.json and each run's config.json and summary.json."""
    entries = []
    for name, train, summary in cells:
        os.makedirs(folder / name)
        (folder / name / "config.json").write_text(json.dumps(parse(tiny_run(**train)).to_dict()))
        if summary is not None:
            (folder / name / "summary.json").write_text(json.dumps(summary))
        entries.append(
            {"name": name, "overrides": train, "status": "done" if summary else "pending", "summary": summary}
        )
    (folder / "sweep.json").write_text(json.dumps({"runs": entries}))


def test_validation_counts_hits_misses_and_unfinished_runs(tmp_path):
    ok = {"outcome": "ok", "unigram_nll": 4.2, "final": {"valid/nll": 2.0}, "steps": 100}
    stalled = {"outcome": "stalled", "unigram_nll": 4.2, "final": {"valid/nll": 4.25}, "steps": 100}
    write_sweep(
        tmp_path,
        [("trained", {"lr": 1e-9}, ok), ("stalled", {"lr": 2e-9}, stalled), ("pending", {"lr": 3e-9}, None)],
    )
    result = diagnose_validation.validate(str(tmp_path), probe_steps=2)
    rows = {r["name"]: r for r in result["rows"]}
    assert set(rows) == {"trained", "stalled"} and result["not_finished"] == ["pending"]
    assert not rows["trained"]["flagged"] and not rows["stalled"]["flagged"]  # lr ~1e-9: nothing moves
    h = result["hit_rate"]
    assert (h["hits"], h["misses"], h["clears"], h["false_alarms"]) == (0, 1, 1, 0) and h["accuracy"] == 0.5
    assert os.path.exists(tmp_path / "diagnose_validation.json")
    text = diagnose_validation.format_result(result)
    assert "flags 0 of 1 stalled or diverged runs, clears 1 of 1 trained runs (accuracy 50% over 2 runs)" in text
    assert [c["name"] for c in diagnose_validation.cells(str(tmp_path), match="^stall")[0]] == ["stalled"]


def test_old_ok_summaries_are_checked_against_the_unigram_level():
    run = parse(tiny_run())
    unigram = tasks.unigram_nll(job.prepare(run)[0].train)
    level = stall_level(unigram)
    near = {"outcome": "ok", "final": {"valid/nll": level}}
    far = {"outcome": "ok", "final": {"valid/nll": 0.99 * level}}
    assert diagnose_validation._label(near, run)[0] == "stalled"
    assert diagnose_validation._label(far, run)[0] == "ok"
    assert diagnose_validation._label(near | {"unigram_nll": unigram}, run) == ("ok", "summary.json")
    assert diagnose_validation._label({"outcome": "ok", "final": {}}, run)[0] is None  # nothing to judge by


def test_hit_rate_of_no_runs_is_nan():
    assert math.isnan(diagnose_validation.hit_rate([])["accuracy"])


def quick_config(**changes):
    config = presets.get_config("quick")
    for dotted, value in changes.items():
        section, _, key = dotted.rpartition("__")
        (config[section] if section else config)[key] = value
    return config


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"train__lr": 0.0}, "config.train.lr=0.0"),
        ({"model__arch": "encoder_decoder", "data__task": "bytes_lm"}, "cannot train config.data.task='bytes_lm'"),
        ({"probe_steps": 200_000}, "config.probe_steps=200000 is longer than the run"),
        ({"thresholds__grad_collapse": -1.0}, "config.thresholds.grad_collapse=-1.0"),
    ],
)
def test_the_schema_refuses_a_bad_probe_in_one_line(changes, words):
    schemas.validate(studies.get("diagnose"), quick_config())  # the preset itself is valid (probe off)
    with pytest.raises(ConfigError, match=re.escape(words)):
        schemas.validate(studies.get("diagnose"), quick_config(**changes))
