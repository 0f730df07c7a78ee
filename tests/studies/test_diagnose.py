"""diagnose at a tiny size: results.json schema and table; bad configs fail cleanly; past runs are read."""

import dataclasses
import json
import os
import subprocess
import sys

import ml_collections
import pytest

import normjax
from normjax.studies import runner
from normjax.studies.diagnose import config as presets
from normjax.studies.diagnose import measure as diagnose
from normjax.studies.diagnose import probe as diagnose_probe
from normjax.studies.diagnose import table as diagnose_report
from normjax.train.config_io import ConfigError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tiny_config(probe_steps=0, **model):
    fields = dict(vocab_size=17, d_model=8, num_heads=2, d_ff=16, num_layers=2, placement="post") | model
    return ml_collections.ConfigDict(
        dict(
            model=dataclasses.asdict(normjax.ModelConfig(**fields)),
            batch_size=2,
            seq_len=4,
            num_batches=2,
            seed=0,
            jacobian_method="auto",
            jacobian_seq_len=3,
            thresholds=dict(grad_ratio=4.0, stream_growth=4.0, ln_jacobian=0.25, block_norm=10.0)
            | diagnose_probe.threshold_values(),
            probe_steps=probe_steps,
            data=dict(task="", seq_len=8, max_bytes=20_000),
            train=dict(lr=1e-3, schedule="constant", warmup_steps=0, batch_size=2, num_steps=100),
        )
    )


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("work")
    config = tiny_config(probe_steps=2)
    return runner.run_study("diagnose", str(workdir), config, diagnose.compute, diagnose.plot), workdir


def test_results_schema_table_and_files(saved):
    saved, workdir = saved
    results = saved["results"]
    assert "verdicts" not in results and results["stack_order"] == ["decoder"]
    s = results["stacks"]["decoder"]
    assert s["num_layers"] == 2 and len(s["stream_rms"]) == 3 and len(s["block_norm"]) == 2
    assert set(s["sigma"]) == set(s["ln_jacobian"]) == {"attn.post", "ffn.post"}
    for metric in ("mean_of_norms", "norm_of_mean"):
        assert len(s["ffn_grad"]["ffn/fc2/kernel"][metric]) == 2
    assert isinstance(results["warnings"], list)
    probe = results["probe"]  # 2 steps of the byte LM (the decoder's task) at lr 1e-3
    assert probe["step"] == [0, 1, 2] and probe["setup"]["task"] == "bytes_lm" and probe["setup"]["lr"] == 1e-3
    assert set(probe["signals"]["stacks"]) == {"decoder"}
    text = diagnose_report.format_table(results)
    assert "probe: 2 steps on bytes_lm at lr 0.001, warmup 0" in text
    assert text.splitlines()[1].split()[:3] == ["layer", "placement", "rms"] and "out" in text
    folder = os.path.join(workdir, "diagnose")
    assert {"results.json", "table.md", "diagnose.png"} <= set(os.listdir(folder))


def test_bad_placement_fails_with_the_message_and_writes_nothing(tmp_path):
    workdir = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.diagnose", f"--workdir={workdir}", "--config.model.placement=bogus"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=os.environ | {"JAX_PLATFORMS": "cpu"},
    )
    assert proc.returncode != 0
    assert "ModelConfig.placement='bogus' is invalid" in proc.stderr and "'post'" in proc.stderr
    assert not workdir.exists()


@pytest.mark.parametrize(
    "model, state",
    [
        ({"placement": "resi_dual"}, "ResiDual's pair"),
        ({"placement": "mhc"}, "hyper-connections' n streams"),
        ({"placement": "pre", "value_residual": True}, "SkipStream"),
    ],
)
def test_multi_stream_models_are_refused_in_one_line_before_any_work(model, state):
    values = presets.get_config("quick").to_dict()
    values["model"] |= model
    with pytest.raises(ConfigError, match=f"diagnose probes blocks that map one residual stream.*{state}"):
        presets.check(values)


def test_past_runs_are_read_defensively(tmp_path):
    assert diagnose_report.past_runs(str(tmp_path), "post", "layernorm", 12) == []
    os.makedirs(tmp_path / "warmup_ablation")
    (tmp_path / "warmup_ablation" / "sweep.json").write_text(
        json.dumps(
            {
                "runs": [
                    {
                        "overrides": {"model.placement": "post", "train.lr": 0.01, "train.warmup_steps": 0},
                        "summary": {"outcome": "diverged"},
                    },
                    {
                        "overrides": {"model.placement": "post", "train.lr": 0.003, "train.warmup_steps": 40},
                        "summary": {"outcome": "diverged"},
                    },
                    {
                        "overrides": {"model.placement": "pre", "train.lr": 0.01, "train.warmup_steps": 0},
                        "summary": None,
                    },
                    {
                        "overrides": {"model.placement": "post", "train.lr": 0.001, "train.warmup_steps": 0},
                        "summary": {"outcome": "stalled"},
                    },
                    {
                        "overrides": {"model.placement": "post", "train.lr": 0.0001, "train.warmup_steps": 0},
                        "summary": {"outcome": "ok"},
                    },
                ]
            }
        )
    )
    os.makedirs(tmp_path / "deep_training")
    (tmp_path / "deep_training" / "results.json").write_text("{not json")
    found = diagnose_report.past_runs(str(tmp_path), "post", "layernorm", 12)
    assert len(found) == 1 and "warmup_ablation" in found[0] and "0.003" not in found[0] and "0.0001" not in found[0]
    assert "stalled at lr 0.001; diverged at lr 0.01" in found[0]
    assert diagnose_report.past_runs(str(tmp_path), "pre", "layernorm", 12) == []
