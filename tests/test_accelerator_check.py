"""scripts/accelerator_check.sh on the CPU: every cell group at its tiny size, and the older phases end to end."""

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest

from benchmarks import accelerator_groups
from normjax import train
from normjax.studies.accelerator_groups.groups import SWEEP_GROUPS
from normjax.studies.judge import judge
from normjax.train import records

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "accelerator_check.sh"


def _run(*args, **kwargs):
    env = os.environ | {"PYTHON": sys.executable, "JAX_PLATFORMS": "cpu"}
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, **kwargs)


@pytest.mark.slow
def test_tiny_check_writes_every_phase(tmp_path):
    out = tmp_path / "out"
    proc = _run("--size=tiny", f"--out={out}", f"--workdir={tmp_path / 'work'}", timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((out / "accelerator_check.json").read_text())
    assert report["machine"]["backend"] == "cpu"
    phases = report["phases"]
    assert {name: p["status"] for name, p in phases.items()} == dict.fromkeys(("train_step", "sweep", "ablation"), "ok")

    impls = ["normjax", "normjax_scan"] + (["seed", "torch"] if importlib.util.find_spec("torch") else [])
    cases = sorted((r["placement"], r["impl"]) for r in phases["train_step"]["rows"])
    assert cases == sorted((p, i) for p in ("post", "pre") for i in impls)
    if "torch" not in impls:
        assert "torch not installed" in phases["train_step"]["note"]

    sweep = {r["mode"]: r for r in phases["sweep"]["rows"]}
    assert list(sweep) == ["plain", "engine"]
    assert (sweep["plain"]["compiles"], sweep["engine"]["compiles"]) == (2, 1)  # 2 runs; the engine shares one step

    cells = phases["ablation"]["rows"]
    assert len(cells) == 8  # the reduced Fig. 2 grid: 2 placements x 2 lrs x 2 warmups
    done = [(c["placement"], c["lr"], c["warmup"], c["steps"]) for c in cells if c["outcome"] != "not done"]
    assert done == [("post", 5e-4, 0, 4)]  # --shard=0/8 trains the first cell only
    assert cells[0]["outcome"] in ("ok", "stalled")  # 4 steps of a tiny model may not leave the unigram level
    assert all(c["outcome"] == "not done" for c in cells[1:])

    table = (out / "accelerator_check.md").read_text()
    for name in ("train_step", "sweep", "ablation"):
        assert f"| {name} | ok |" in table
    assert sum(line.startswith("| 32/2/64 |") for line in table.splitlines()) == len(cases)
    assert sum(line.startswith(("| plain |", "| engine |")) for line in table.splitlines()) == 2
    assert sum(line.startswith(("| post |", "| pre |")) for line in table.splitlines()) == 8
    assert sorted(os.listdir(out / "logs")) == ["ablation.log", "probe.log", "sweep.log", "train_step.log"]


def test_a_used_workdir_is_refused(tmp_path):
    (tmp_path / "old_run").mkdir()
    proc = _run("--size=tiny", f"--out={tmp_path / 'out'}", f"--workdir={tmp_path}", timeout=120)
    assert proc.returncode != 0
    assert "is not empty" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_a_phase_out_of_time_is_reported_not_lost(tmp_path):
    out = tmp_path / "out"
    proc = _run("--size=tiny", f"--out={out}", "--phases=sweep", "--budget_s=2", timeout=300)
    assert proc.returncode == 1
    report = json.loads((out / "accelerator_check.json").read_text())
    assert list(report["phases"]) == ["sweep"]
    assert report["phases"]["sweep"]["status"] == "timed out after 2 s"
    assert report["phases"]["sweep"]["rows"] == []
    assert "| sweep | timed out after 2 s |" in (out / "accelerator_check.md").read_text()


# One group of each kind (the S5 byte LM, Xiong's translation, the answer's placements, R5/N1's): s5_pre trains in
# the cut-off test below; every group's config is built and checked (test_every_group_config_is_a_valid_grid).
TRAINED_HERE = ("s5_post", "xiong_fig2", "answer24_b", "r5n1_mixln")


def test_every_group_config_is_a_valid_grid():
    from normjax.studies.accelerator_groups.groups import check_study_config

    for name in set(accelerator_groups.GROUPS) - set(SWEEP_GROUPS):  # a whole study at other settings
        for tiny in (False, True):
            check_study_config(name, tiny)  # as its study's CLI checks it
    for name in SWEEP_GROUPS:
        for tiny in (False, True):
            config = accelerator_groups.group_config(name, tiny)
            runs = train.expand(config)  # every run's config validated, as run_grid does first
            assert runs and all(r.name.startswith(f"grid={name}") for r in runs), name
            assert not tiny or 2 <= len(runs) <= 4, name


@pytest.mark.slow
def test_a_group_of_each_kind_runs_tiny_into_run_folders_of_the_study_format(tmp_path):
    """The groups trained in one fresh process, as the script runs them."""
    code = (
        "import json, sys; from benchmarks import accelerator_groups as g; "
        "print(json.dumps({n: g.run_group(n, sys.argv[1], tiny=True, progress=False) for n in sys.argv[2:]}))"
    )
    env = os.environ | {"JAX_PLATFORMS": "cpu"}
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path), *TRAINED_HERE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert list(results) == list(TRAINED_HERE)
    for name, result in results.items():
        runs = result["runs"]
        assert 2 <= len(runs) <= 4 and all(r["status"] == "done" for r in runs), name
        assert all(r["name"].startswith(f"grid={name},") and r["group"] == name for r in runs)
        folder = tmp_path / "accelerator_groups" / name
        assert {"sweep.json", "runs_code.json", "group.json"} <= set(os.listdir(folder))
        for r in runs:
            summary = records.read_json(str(folder / r["name"] / "summary.json"))
            assert summary["device"]["backend"] == "cpu" and summary["device"]["dtype"] == "float32"
            assert (folder / r["name"] / "metrics.jsonl").exists()
    # the study that judges the groups reads them: tiny groups are listed with their device, never judged
    saved = records.read_json(accelerator_groups.judge_groups(str(tmp_path)))
    groups = saved["results"]["groups"]
    for name in TRAINED_HERE:
        assert groups[name]["present"] and groups[name]["tiny"] and groups[name]["done"] == groups[name]["expected"]
        assert all(r["device"]["backend"] == "cpu" for r in groups[name]["runs"])
    assert not groups["s5_pre"]["present"] and groups["s5_pre"]["expected"] == 20
    rows = judge("accelerator_groups", saved["results"])
    assert {r["verdict"] for r in rows} == {"not testable at this scale"}
    assert (
        "s5_post ran at its tiny size" in rows[0]["measured"]
        and "xiong_fig2 ran at its tiny size" in rows[1]["measured"]
    )


def test_a_group_cut_off_by_its_budget_resumes_with_the_same_command(tmp_path):
    args = ("s5_pre", "--tiny", f"--workdir={tmp_path}")
    cut = _run(*args, "--budget_s=0.01", timeout=300)
    assert cut.returncode == 3 and "rerun the same command to resume" in cut.stdout, cut.stdout + cut.stderr[-2000:]
    sweep = tmp_path / "accelerator_groups" / "s5_pre" / "sweep.json"
    assert not sweep.exists() or "pending" in sweep.read_text()
    done = _run(*args, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "4/4 runs done" in done.stdout and "group s5_pre on 1 x cpu" in done.stdout
    assert "judged with the other groups there" in done.stdout
    full = _run("s5_pre", f"--workdir={tmp_path}", timeout=120)  # the full-size group into the tiny one's folder
    assert full.returncode == 2 and "holds the tiny group s5_pre" in full.stderr


def test_every_group_at_full_size_is_one_program_per_placement():
    from normjax.train.config_schema import shape_key
    from normjax.train.sweep import expand

    for name in SWEEP_GROUPS:
        runs = expand(accelerator_groups.group_config(name))
        placements = {r.run.model["placement"] for r in runs}
        assert len({shape_key(r.run) for r in runs}) == len(placements), name  # lr, warmup, seed: traced
        assert all(r.name.startswith(f"grid={name},") for r in runs)


@pytest.mark.slow
def test_a_study_group_runs_tiny_into_its_folder_and_is_judged_by_its_studys_rules(tmp_path):
    """deep128_s7 (deep_training at other settings) at its tiny size: its results.json in the group's folder, the
    study's pieces resumable; the accelerator_groups study lists it as tiny and judges nothing from it."""
    proc = _run("deep128_s7", "--tiny", f"--workdir={tmp_path}", timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "deep_training done in" in proc.stdout and "judged with the other groups there" in proc.stdout
    folder = tmp_path / "accelerator_groups" / "deep128_s7"
    assert (folder / "deep_training" / "results.json").exists() and (folder / "group.json").exists()
    saved = records.read_json(str(tmp_path / "accelerator_groups" / "results.json"))
    group = saved["results"]["groups"]["deep128_s7"]
    assert group["tiny"] and group["done"] == 1 and group["settings"]["d_model"] == 16
    rows = {r["claim"]: r for r in judge("accelerator_groups", saved["results"])}
    assert rows["S7"]["verdict"] == "not testable at this scale" and "ran at its tiny size" in rows["S7"]["measured"]
    # the same results as a finished full-size group: S7 judged by deep_training's own rule, the scale named
    from normjax.studies.accelerator_groups import verdicts

    judged = verdicts.study_group_rows({"deep128_s7": group | {"tiny": False}})
    assert [r["claim"] for r in judged] == ["S7"] and "waits" not in judged[0]["measured"]
    assert judged[0]["measured"].startswith("deep128_s7 (d_model 16, num_steps 12, s7_steps 12) on cpu:0: ")
    # deep_training's S7 rule read it (12 steps train nothing, so that rule says why it cannot judge)
    assert "Post-LN" in judged[0]["measured"] and "shallowest depth" in judged[0]["reason"]
    again = _run("deep128_s7", "--tiny", f"--workdir={tmp_path}", timeout=300)
    assert again.returncode == 0 and "[deep_training] already done" in again.stdout


@pytest.mark.parametrize("args", [("--budget_s=-1",), ("--budget_s=nan",), ("--workdir=FILE",)])
def test_a_bad_budget_or_a_file_workdir_is_one_line_exit_2(tmp_path, args):
    (tmp_path / "FILE").write_text("")
    args = [a.replace("FILE", str(tmp_path / "FILE")) for a in args]
    proc = _run("s5_post", "--tiny", *args, timeout=120)
    assert proc.returncode == 2 and "error: --" in proc.stderr and "Traceback" not in proc.stderr
