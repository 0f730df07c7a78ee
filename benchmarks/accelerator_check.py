"""Accelerator check: the train-step and sweep benchmarks and a short `:paper` warmup ablation, one JSON + table.

  scripts/accelerator_check.sh [--size=full|tiny] [--out=DIR] [--budget_s=480] [--ablation_steps=200]
                               [--phases=train_step,sweep,ablation] [--iwslt=data/iwslt14.tokenized.de-en]
                               [--gettext_corpus=DIR]

A probe process first reports the backend, the devices and the package versions (and stops the check when a
package is missing). Then each phase runs as its own process (the benchmarks define clashing absl flags); a
phase that fails or runs past its share of --budget_s is stopped, reported as such, and the next phase runs:
  train_step  benchmarks.train_step: normjax (loop, scan) x (Post-LN, Pre-LN) at d 512 / FFN 2048 / 8 heads and
              d 512 / FFN 1024 / 4 heads. Its PyTorch columns are added only when torch is installed *and* JAX
              runs on the CPU: that benchmark steps PyTorch on the CPU, so beside a GPU the ratio would compare
              devices, not implementations.
  sweep       benchmarks.sweep: the 16-run lr x warmup grid, a plain re-jitting loop vs the sweep engine.
  ablation    a reduced Xiong et al. Fig. 2 grid: normjax.studies.warmup_ablation at the `:paper` model (6-6
              layers, d 512, FFN 1024, 4 heads, 4096-token batches, Adam 0.9/0.98), placement {post, pre} x lr
              {5e-4, 1e-3} x warmup {0, steps/3} (1200 steps: warmup 400 = 8x Adam's horizon 1/(1 - 0.98),
              the "4000-equivalent" of a run 3x longer than its warmup), one seed, --ablation_steps per cell:
              IWSLT14 De-En when --iwslt holds the prepared files, else the gettext De-En corpus built from this
              machine's catalogs (normjax.train.data_gettext), else -- with the reason in the note -- the
              synthetic translation task at the same sizes. A short run: it exercises the path and measures
              speed; it is not the paper's 50k-update result.
--size=tiny shrinks every phase to seconds on a CPU (tests/test_accelerator_check.py runs it): d 16-32 models, a
few steps, synthetic data, and only the first cell of the ablation grid (--shard=0/12).

Writes to --out (default $OUT, else results/accelerator_check): accelerator_check.json (machine; per phase the
status, wall time, note, command and rows), accelerator_check.md (the same as tables) and logs/<phase>.log, all
rewritten after every phase. Scratch files (the ablation's run folders) go to a fresh temporary folder, or to
--workdir, which must not exist yet or be empty (finished runs found there would be skipped, not re-timed).
Exit status 1 when the probe or any phase failed or timed out.
"""

import json
import os
import subprocess
import sys
import tempfile
import time

from absl import app, flags

from normjax.io import read_json, write_json
from normjax.train.data_text import IWSLT_FILES

PHASES = ("train_step", "sweep", "ablation")
_SHARE = {"train_step": 0.2, "sweep": 0.2, "ablation": 0.6}  # of the budget; unused time goes to later phases

_SIZE = flags.DEFINE_enum("size", "full", ["full", "tiny"], "full: the benchmarks' sizes; tiny: seconds on a CPU.")
_OUT = flags.DEFINE_string("out", None, "Output folder (default: $OUT, else results/accelerator_check).")
_WORKDIR = flags.DEFINE_string("workdir", None, "Scratch folder (default: a fresh temporary one).")
_PHASES = flags.DEFINE_list("phases", list(PHASES), f"Any of {', '.join(PHASES)}.")
_BUDGET = flags.DEFINE_integer("budget_s", 480, "Wall-clock seconds for all phases together.")
_ABLATION_STEPS = flags.DEFINE_integer("ablation_steps", 1200, "Train steps per ablation cell (a multiple of 30).")
_IWSLT = flags.DEFINE_string("iwslt", "data/iwslt14.tokenized.de-en", "Prepared IWSLT14 De-En folder, if any.")
_GETTEXT = flags.DEFINE_string(
    "gettext_corpus", None, "A gettext De-En corpus built elsewhere (its folder); default: built from this machine's."
)

_TINY_TRAIN_STEP = ["--sizes=32x2x64", "--layers=1", "--batch=4", "--length=16", "--rounds=1", "--steps_per_round=1"]
_TINY_SWEEP = ["--lrs=1e-3", "--warmups=1,2", "--steps=4", "--d_model=16", "--layers=1"]
_TINY_ABLATION = {
    "data.task": "synthetic",
    "data.num_train": 400,
    "data.num_valid": 32,
    "data.max_len": 12,
    "data.buckets": "(12,)",
    "model.d_model": 16,
    "model.num_heads": 2,
    "model.d_ff": 32,
    "model.num_layers": 1,
    "train.num_steps": 4,
    "train.max_tokens": 128,
    "train.log_every": 2,
    "train.eval_every": 4,
    "train.checkpoint_every": 4,
    "train.bleu_examples": 0,
    "train.diag_every": 0,
}
_PROBE = """
import importlib.util, json, os, platform
import jax, flax, optax, orbax.checkpoint, ml_collections, sacrebleu
devices = jax.devices()
print(json.dumps({
    "backend": jax.default_backend(), "device_count": len(devices), "process_count": jax.process_count(),
    "device_kind": devices[0].device_kind, "jax": jax.__version__, "flax": flax.__version__,
    "optax": optax.__version__, "python": platform.python_version(), "cpu_count": os.cpu_count(),
    "torch": importlib.util.find_spec("torch") is not None,
}))
"""


def iwslt_ready(path: str) -> bool:
    return all(os.path.isfile(os.path.join(path, name)) for name in IWSLT_FILES)


def gettext_corpus() -> tuple[str | None, str]:
    """(folder, "") of the gettext De-En corpus: --gettext_corpus, else the default one built into the cache from
    this machine's catalogs; or (None, why not). The study checks the folder's files against its manifest."""
    from normjax.train import data_gettext  # sentencepiece: only when the check needs it
    from normjax.train.data_text import DataError

    if _GETTEXT.value is not None:
        if os.path.isfile(os.path.join(_GETTEXT.value, data_gettext.MANIFEST)):
            return _GETTEXT.value, ""
        return None, f"--gettext_corpus={_GETTEXT.value} holds no {data_gettext.MANIFEST}"

    try:
        return data_gettext.cached_corpus(data_gettext.CorpusSpec()), ""
    except DataError as e:
        return None, str(e)


def train_step_command(size: str, machine: dict, out: str) -> tuple[list[str], str]:
    """The benchmarks.train_step command and the note on its PyTorch columns."""
    impls, note = ["normjax", "normjax_scan"], ""
    if not machine["torch"]:
        note = "torch not installed: PyTorch columns skipped (pip install -r benchmarks/requirements.txt)"
    elif machine["backend"] != "cpu":
        note = (
            f"PyTorch columns skipped: the benchmark steps PyTorch on the CPU and normjax on {machine['backend']}, "
            "so their ratio would compare devices"
        )
    else:
        impls += ["seed", "torch"]
    args = _TINY_TRAIN_STEP if size == "tiny" else []
    return ["-m", "benchmarks.train_step", f"--impls={','.join(impls)}", f"--json_out={out}", *args], note


def sweep_command(size: str, out: str) -> list[str]:
    modes = "--modes=plain,engine"  # worker processes would share the one accelerator
    return ["-m", "benchmarks.sweep", modes, f"--json_out={out}", *(_TINY_SWEEP if size == "tiny" else [])]


def ablation_command(size: str, steps: int, iwslt: str, workdir: str) -> tuple[list[str], str]:
    """The normjax.studies.warmup_ablation command at the :paper preset (its folder `workdir` ends in
    warmup_ablation), and the note on its data and length."""
    if size == "tiny":
        overrides, shard = dict(_TINY_ABLATION), "0/8"
        note = "tiny: synthetic data, d 16, 4 steps, only cell 0 of the grid (--shard=0/8)"
    else:
        overrides, shard = {}, "0/1"
        if iwslt_ready(iwslt):
            overrides["data.path"] = iwslt
            data = f"IWSLT14 De-En from {iwslt}"
        elif (corpus := gettext_corpus())[0]:
            overrides |= {"data.task": "gettext", "data.path": corpus[0]}
            built = "given by --gettext_corpus" if _GETTEXT.value else "from this machine's catalogs"
            data = f"gettext De-En {built} ({corpus[0]}; no IWSLT14 files in {iwslt})"
        else:
            overrides["data.task"] = "synthetic"
            data = f"synthetic translation task (no IWSLT14 files in {iwslt}; no gettext corpus: {corpus[1]})"
        overrides |= {
            "train.num_steps": steps,
            "train.log_every": steps // 10,
            "train.eval_every": steps,
            "train.checkpoint_every": steps,
            "train.bleu_examples": 200,
            "train.diag_every": steps // 2,
        }
        note = (
            f":paper model and batches, {steps} steps per cell, warmups {{0, {steps // 3}}}, one seed (not the "
            f"50k-update run), {data}"
        )
    args = [f"--config.{key}={value}" for key, value in overrides.items()]
    config = f"--config={write_scaled_grid(steps if size != 'tiny' else overrides['train.num_steps'], workdir)}"
    parent = os.path.dirname(workdir.rstrip(os.sep))  # the study writes PARENT/warmup_ablation = workdir
    command = ["-m", "normjax.studies.warmup_ablation", config, f"--workdir={parent}", f"--shard={shard}"]
    return [*command, "--progress=true", *args], note  # per-step progress in its log: where a slow phase spends time


_SCALED_GRID = '''"""Xiong et al.'s Fig. 2 grid at the :paper model, reduced to {steps} steps (accelerator_check)."""

from normjax.studies.warmup_ablation.config import get_config as paper_config
from normjax.train.config_io import sweep_axes


def get_config(arg: str = "paper"):
    config = paper_config("paper")
    axes = {{key: list(values) for key, values in config.sweep.axes.items()}}
    axes["train.warmup_steps"] = {warmups}
    axes["train.seed"] = [config.train.seed]  # one seed, main grid only: a timing check, not a verdict
    config.sweep.axes = sweep_axes(axes)
    config.sweep.grids = {{}}
    config.train.decay_start = {longest}  # the fair control: every arm decays from the longest warmup
    return config
'''


def write_scaled_grid(steps: int, workdir: str) -> str:
    """A config file beside `workdir`: the :paper grid with warmups {0, 4000} reduced to {0, steps / 3}, so the
    run is 3x its longest warmup (4000 warmup steps and 50k updates do not fit the time budget)."""
    warmups = [0, max(1, steps // 3)]
    path = f"{workdir.rstrip(os.sep)}_config.py"
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write(_SCALED_GRID.format(steps=steps, warmups=warmups, longest=max(warmups)))
    return path


def run_process(args: list[str], log_path: str, timeout_s: float, env: dict | None = None) -> tuple[str, float]:
    """Runs `python args` with its output in log_path; ("ok" | "failed (exit N)" | "timed out", seconds)."""
    start = time.perf_counter()
    with open(log_path, "w") as log:
        # same session as the check: whatever ends the check (a job limit, Ctrl-C) also ends the phase
        proc = subprocess.Popen([sys.executable, *args], stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            rc = proc.wait(timeout=max(timeout_s, 1.0))
        except subprocess.TimeoutExpired:
            _stop(proc)
            return f"timed out after {timeout_s:.0f} s", time.perf_counter() - start
    return ("ok" if rc == 0 else f"failed (exit {rc})"), time.perf_counter() - start


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the phase's process, SIGKILL if it is still there 10 s later."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def log_tail(path: str, lines: int = 15) -> str:
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-lines:])


def probe(logs: str) -> dict:
    """The machine as the phases will see it; raises RuntimeError when the environment is incomplete."""
    env = os.environ | {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}  # do not hold GPU memory while probing
    path = os.path.join(logs, "probe.log")
    status, _ = run_process(["-c", _PROBE], path, 300, env)
    if status != "ok":
        raise RuntimeError(f"probe {status}:\n{log_tail(path)}")
    with open(path) as f:
        return json.loads(f.read().strip().splitlines()[-1])


def run_phase(name: str, machine: dict, work: str, logs: str, timeout_s: float) -> dict:
    """Runs one phase; its record: status, wall_s, note, command, rows (and the log tail on failure)."""
    raw = os.path.join(work, f"{name}.json")
    if name == "train_step":
        args, note = train_step_command(_SIZE.value, machine, raw)
    elif name == "sweep":
        args, note = sweep_command(_SIZE.value, raw), ""
    else:
        raw = os.path.join(work, "warmup_ablation")  # the study's folder under --workdir=work
        args, note = ablation_command(_SIZE.value, _ABLATION_STEPS.value, _IWSLT.value, raw)
    log = os.path.join(logs, f"{name}.log")
    status, wall = run_process(args, log, timeout_s)
    record = {"status": status, "wall_s": wall, "note": note, "command": " ".join(["python", *args])}
    if status != "ok":
        record["log_tail"] = log_tail(log)
    # a timed-out ablation keeps its finished cells; its verdicts (results.json) are left out on purpose:
    # the claims are about full-length training, not these short runs
    record["rows"] = phase_rows(name, raw)
    if name == "train_step" and os.path.exists(raw):
        record["matmul_peak_gflops"] = read_json(raw)["peak_flops"] / 1e9  # the % peak column's reference
    return record


def output_folder() -> str:
    return _OUT.value or os.environ.get("OUT") or "results/accelerator_check"


def scratch_folder() -> str:
    if _WORKDIR.value is None:
        return tempfile.mkdtemp(prefix="accelerator_check-")
    if os.path.isdir(_WORKDIR.value) and os.listdir(_WORKDIR.value):
        raise app.UsageError(f"--workdir={_WORKDIR.value} is not empty: its finished runs would not be re-timed")
    os.makedirs(_WORKDIR.value, exist_ok=True)
    return _WORKDIR.value


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    unknown = sorted(set(_PHASES.value) - set(PHASES))
    if unknown:
        raise app.UsageError(f"--phases: unknown {unknown}; valid: {', '.join(PHASES)}")
    if _ABLATION_STEPS.value < 30 or _ABLATION_STEPS.value % 30:
        raise app.UsageError("--ablation_steps must be a positive multiple of 30 (warmup steps/3, log every steps/10)")
    out, work = output_folder(), scratch_folder()
    logs = os.path.join(out, "logs")
    os.makedirs(logs, exist_ok=True)
    report = {"size": _SIZE.value, "created": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "phases": {}}
    try:
        report["machine"] = probe(logs)
    except RuntimeError as e:
        report["machine"] = {"error": str(e)}
    deadline = time.perf_counter() + _BUDGET.value
    todo = [p for p in PHASES if p in _PHASES.value]
    for i, name in enumerate(todo):
        if "error" in report["machine"]:
            report["phases"][name] = {"status": "skipped (the probe failed)", "wall_s": 0.0, "rows": []}
            continue
        left = deadline - time.perf_counter()
        timeout = left * _SHARE[name] / sum(_SHARE[p] for p in todo[i:])
        print(f"[accelerator_check] {name}: up to {timeout:.0f} s", flush=True)
        report["phases"][name] = run_phase(name, report["machine"], work, logs, timeout)
        print(f"[accelerator_check] {name}: {report['phases'][name]['status']}", flush=True)
        write_report(report, out)
    write_report(report, out)
    print(markdown(report))
    print(f"[accelerator_check] wrote {out}/accelerator_check.json and .md; scratch files in {work}")
    failed = "error" in report["machine"] or any(p["status"] != "ok" for p in report["phases"].values())
    sys.exit(1 if failed else 0)


def write_report(report: dict, out: str) -> None:
    write_json(os.path.join(out, "accelerator_check.json"), report)
    with open(os.path.join(out, "accelerator_check.md"), "w") as f:
        f.write(markdown(report))


def phase_rows(name: str, raw: str) -> list[dict]:
    """The rows a phase left in `raw` (its JSON, or the ablation's sweep folder); [] when there are none."""
    if name != "ablation":
        if not os.path.exists(raw):
            return []
        data = read_json(raw)
        return data["rows"] if name == "train_step" else data
    path = os.path.join(raw, "sweep.json")
    if not os.path.exists(path):
        return []
    rows = []
    for run in read_json(path)["runs"]:
        summary = run["summary"] or {}
        final = summary.get("final", {})
        rows.append(
            {
                "placement": run["overrides"]["model.placement"],
                "lr": run["overrides"]["train.lr"],
                "warmup": run["overrides"]["train.warmup_steps"],
                "outcome": summary.get("outcome", "not done"),
                "steps": summary.get("steps"),
                "valid_nll": final.get("valid/nll"),
                "bleu": final.get("valid/bleu"),
                "steps_per_s": summary.get("steps_per_s"),
                "wall_s": summary.get("wall_time_s"),
            }
        )
    return rows


_TABLES = {  # phase: (title, [(header, row key, format)])
    "train_step": (
        "train_step (encoder, Adam; sizes in the command; median step of interleaved rounds)",
        [
            ("d / heads / FFN", lambda r: f"{r['d_model']}/{r['heads']}/{r['d_ff']}", "{}"),
            ("placement", "placement", "{}"),
            ("impl", "impl", "{}"),
            ("step ms", lambda r: 1e3 * r["step_s"], "{:.1f}"),
            ("tokens/s", "tokens_per_s", "{:.0f}"),
            ("vs torch", "vs_torch", "{:.2f}"),
            ("GFLOP/s", "gflops", "{:.1f}"),
            ("% peak", lambda r: 100 * r["peak_fraction"], "{:.1f}"),
        ],
    ),
    "sweep": (
        "sweep (lr x warmup grid, encoder-decoder; speedup = the plain loop's wall time / this mode's)",
        [
            ("mode", "mode", "{}"),
            ("runs", "runs", "{}"),
            ("wall s", "wall_s", "{:.1f}"),
            ("steps/s", "steps_per_s", "{:.1f}"),
            ("compiles", "compiles", "{}"),
            ("speedup", "speedup", "{:.2f}"),
            ("max rel. loss diff", "max_rel_loss_diff", "{:.1e}"),
        ],
    ),
    "ablation": (
        "warmup ablation (`:paper` preset, short)",
        [
            ("placement", "placement", "{}"),
            ("lr", "lr", "{:g}"),
            ("warmup", "warmup", "{}"),
            ("outcome", "outcome", "{}"),
            ("steps", "steps", "{}"),
            ("valid nll", "valid_nll", "{:.3f}"),
            ("BLEU", "bleu", "{:.1f}"),
            ("steps/s", "steps_per_s", "{:.2f}"),
            ("wall s", "wall_s", "{:.1f}"),
        ],
    ),
}


def _cell(row: dict, key, fmt: str) -> str:
    value = key(row) if callable(key) else row.get(key)
    return "-" if value is None or value != value else fmt.format(value)  # None or NaN: no value


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def markdown(report: dict) -> str:
    """The report as markdown: the machine, a status table of the phases, then one table per phase."""
    m = report["machine"]
    if "error" in m:
        lines = [
            f"# Accelerator check ({report['size']}, {report['created']}): probe failed",
            "",
            "```",
            m["error"],
            "```",
        ]
    else:
        lines = [
            f"# Accelerator check ({report['size']}, {report['created']})",
            "",
            f"{m['device_count']} x {m['device_kind']} ({m['backend']}), {m['process_count']} process(es), "
            f"{m['cpu_count']} CPU cores; jax {m['jax']}, flax {m['flax']}, optax {m['optax']}, "
            f"Python {m['python']}, torch {'installed' if m['torch'] else 'absent'}",
        ]
    phases = report["phases"]
    lines += [
        "",
        *_table(
            ["phase", "status", "wall s", "note"],
            [[name, p["status"], f"{p['wall_s']:.1f}", p.get("note", "")] for name, p in phases.items()],
        ),
    ]
    for name, p in phases.items():
        title, columns = _TABLES[name]
        lines += ["", f"## {title}", ""] + ([f"`{p['command']}`", ""] if "command" in p else [])
        if "log_tail" in p:
            lines += [f"{p['status']}; the end of its log:", "```", p["log_tail"].rstrip(), "```", ""]
        if not p["rows"]:
            lines.append("no rows")
            continue
        lines += _table([c[0] for c in columns], [[_cell(r, key, fmt) for _, key, fmt in columns] for r in p["rows"]])
        if "matmul_peak_gflops" in p:
            lines += [
                "",
                f"% peak: of the best float32 matmul rate of the same run, {p['matmul_peak_gflops']:.0f} GFLOP/s",
            ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    app.run(main)
