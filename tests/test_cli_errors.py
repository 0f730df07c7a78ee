"""Every experiment CLI: a bad value, key, file or folder is one line and exit status 2, with nothing written."""

import importlib
import json
import os
import pathlib
import subprocess
import sys

import jax.numpy as jnp
import pytest
from flax import nnx

import normjax
from normjax.experiments import common
from normjax.studies.warmup_ablation import config as warmup_ablation_config
from normjax.train import memory
from normjax.train.config_io import ConfigError, default_config, path_component, sweep_axes
from normjax.train.sweep import expand

ROOT = pathlib.Path(__file__).resolve().parents[1]
MAINS = (
    "amplification",
    "cost",
    "deep_training",
    "depth_scaling",
    "diagnose",
    "grad_norms_at_init",
    "hidden_norms",
    "jacobian_spectrum",
    "ln_jacobian",
    "train",
    "trained_layers",
    "warmup_ablation",
)
HUGE = ["--config.model.d_model=65536", "--config.model.d_ff=262144", "--config.model.num_heads=8"]
BYTES_LM = ["--config.data.task=bytes_lm", "--config.model.arch=decoder"]


def _cli(name: str, args: list[str], workdir) -> int:
    """The CLI `name` in this process ("{no_workdir}" in args: no --workdir flag)."""
    module = "normjax.experiments.train" if name == "train" else f"normjax.studies.{name}.__main__"
    exp = importlib.import_module(module).EXPERIMENT
    workdir = [] if "{no_workdir}" in args else [f"--workdir={workdir}"]
    return common.run_cli(exp, ["prog", *workdir, *[a for a in args if a != "{no_workdir}"]])


def _corpus(tmp_path, files: int, text: str) -> str:
    folder = tmp_path / "corpus"
    folder.mkdir()
    for i in range(files):
        (folder / f"f{i}.py").write_text(text)
    return str(folder)


CASES = [
    # (main, arguments, words of the message); "{tmp}" is a fresh folder, "{file}" a file in it
    ("train", ["--config.train.batch_size=0"], ["config.train.batch_size=0"]),
    ("train", ["--config.train.lr=nan"], ["config.train.lr=nan", "finite"]),
    ("train", ["--config.train.b1=inf"], ["config.train.b1=inf"]),
    ("train", ["--config.train.label_smoothing=nan"], ["config.train.label_smoothing"]),
    ("train", ["--config.train.divergence_loss=nan"], ["config.train.divergence_loss"]),
    ("train", ["--config.model.norm_eps=inf"], ["norm_eps=inf"]),
    ("train", ["--config.model.dyt_alpha=inf"], ["dyt_alpha=inf"]),
    ("train", ["--config.model.layerscale_init=nan"], ["layerscale_init=nan"]),
    ("train", ["--config.train.warmup_steps=1000"], ["warmup_steps=1000", "longer than the run"]),
    ("train", ["--config.foo=1"], ["unknown key config.foo"]),
    ("train", ["--config.train.lrr=1"], ["config.train.lrr", 'did you mean "lr"']),
    ("train", ["--config.train.optimizer=lion"], ["config.train.optimizer='lion'", "adamw"]),
    ("train", ["--config.train.batch_size=2.5"], ["config.train.batch_size"]),
    ("train", [*BYTES_LM, "--config.data.seq_len=999", "--config.model.max_len=64"], ["max_len=64", "999"]),
    ("train", HUGE, ["does not fit", "GiB", "memory is"]),
    ("train", ["--config={tmp}/missing.py:quick"], ["missing.py", "not found"]),
    ("train", ["--config=experiments/configs/train.py:huge"], ["unknown preset 'huge'"]),
    ("train", ["extra"], ["unexpected arguments: extra"]),
    ("train", ["--workdir="], ["--workdir is empty"]),
    ("train", ["{no_workdir}"], ["--workdir is required"]),
    ("train", ["--workdir={file}"], ["is a file"]),
    ("train", ["--workdir={file}/run"], ["which is a file"]),
    ("train", ["--config.data.task=iwslt14", "--config.data.path={tmp}"], ["config.data.path"]),
    ("train", [*BYTES_LM, "--config.data.path={tmp}"], ["data error", "gives 0", "at least 2"]),
    ("train", [*BYTES_LM, "--config.data.path={corpus}"], ["data error", "shorter than one batch"]),
    ("diagnose", ["--config.batch_size=0"], ["config.batch_size=0"]),
    ("diagnose", ["--config.seq_len=999"], ["config.seq_len=999", "max_len"]),
    ("diagnose", ["--config.jacobian_method=qr"], ["config.jacobian_method='qr'", "lanczos"]),
    ("diagnose", ["--config.foo=1"], ["unknown key config.foo"]),
    ("diagnose", ["--config.num_batchs=2"], ["config.num_batchs", 'did you mean "num_batches"']),
    ("diagnose", ["--config.model.placement=bogus"], ["ModelConfig.placement='bogus'", "'post'"]),
    ("diagnose", ["--config.model.norm_eps=nan"], ["norm_eps=nan"]),
    ("diagnose", ["--config.thresholds.grad_ratio=-1"], ["config.thresholds.grad_ratio=-1.0"]),
    ("diagnose", ["--workdir="], ["--workdir is empty"]),
    ("diagnose", [*HUGE[:2], "--config.model.num_heads=8", "--config.batch_size=4096"], ["does not fit"]),
    ("hidden_norms", ["--config.settings=../../../../escape_hn"], ["config.settings[0]", "theory, real"]),
    ("hidden_norms", ["--config.settings=('../../../../escape_hn',)"], ["config.settings[0]", "theory, real"]),
    ("hidden_norms", ["--config.placements=post,bogus"], ["config.placements[1]='bogus'"]),
    ("hidden_norms", ["--config.placements=pre,pre+bogus"], ["config.placements[1]='pre+bogus'", "qk_norm"]),
    ("hidden_norms", ["--config.placements=peri_ln", "--config.settings=theory"], ["peri_ln", "nothing would be"]),
    ("hidden_norms", ["--config.num_seeds=0"], ["config.num_seeds=0"]),
    ("hidden_norms", ["--config.d_model=130"], ["num_heads=4", "d_model=130"]),
    ("hidden_norms", ["--workdir={file}"], ["is a file"]),
    ("ln_jacobian", ["--config.gamma_noise=nan"], ["config.gamma_noise=nan"]),
    ("depth_scaling", ["--config.depths=6,0"], ["config.depths[1]=0"]),
    ("grad_norms_at_init", ["--config.archs=gpt"], ["config.archs[0]='gpt'"]),
    ("jacobian_spectrum", ["--config.resolution=nan"], ["config.resolution=nan"]),
    ("jacobian_spectrum", ["--config.placements=peri_ln+embedding_norm"], ["peri_ln+embedding_norm", "already"]),
    (
        "jacobian_spectrum",
        ["--config.placements=pre,resi_dual", "--config.exact_max_n=16"],  # the matrix-free regime
        ["config.placements[1]='resi_dual'", "two"],
    ),
    (
        "hidden_norms",
        ["--config.placements=pre,ngpt", "--config.settings=theory"],  # nGPT is measured in the real setting only
        ["config.placements[1]='ngpt'", "theory=True"],
    ),
    (
        "grad_norms_at_init",
        ["--config.placements=ngpt", "--config.archs=encoder_decoder"],  # nGPT: decoder and encoder only
        ["config.placements[0]='ngpt'", "encoder_decoder"],
    ),
    ("grad_norms_at_init", ["--config.placements=hybrid+qk_norm"], ["config.placements[0]='hybrid+qk_norm'"]),
    ("ln_jacobian", ["--config.placements=pre+qk_norm"], ["config.placements[0]='pre+qk_norm'"]),
    ("amplification", ["--config.kinds=bogus"], ["config.kinds[0]='bogus'"]),
    ("amplification", ["--config.eps.random_sign=0"], ["config.eps.random_sign=0"]),
    ("cost", ["--config.placements=post,pre", "--config.reference=sandwich"], ["config.reference='sandwich'"]),
    ("deep_training", ["--config.runs=pre:bogus"], ["config.runs", "'pre:bogus'"]),
    ("deep_training", ["--config.side_runs=pre:rmsnorm+no_bias"], ["config.side_runs[0]", "no_bias needs"]),
    ("deep_training", ["--config.early_steps=999"], ["config.early_steps=999", "longer than the run"]),
    ("trained_layers", ["--config.runs=pre,lns"], ["config.runs", "lacks mixln"]),
    ("trained_layers", ["--config.runs=pre,mixln,lns,bogus"], ["config.runs[3]='bogus'"]),
    ("trained_layers", ["--config.warmup=40"], ["config.warmup=40", "num_steps=40"]),
    ("trained_layers", ["--config.jacobian_len=99"], ["config.jacobian_len=99", "seq_len"]),
    ("trained_layers", ["--config.num_seeds=2"], ["config.num_seeds=2"]),
    ("warmup_ablation", ["--config.train.lr=-1"], ["config.train.lr=-1.0"]),
    ("warmup_ablation", ["--config.model.placement=bogus"], ["ModelConfig.placement='bogus'"]),
    ("warmup_ablation", ["--shard=2/2"], ["--shard='2/2'"]),
    ("warmup_ablation", ["--config.sweep.axes.x=1"], ["sweep axes are set in the config file"]),
]


@pytest.mark.parametrize(("name", "args", "words"), CASES, ids=[f"{c[0]}:{' '.join(c[1])[:60]}" for c in CASES])
def test_bad_input_is_one_line_exit_2_and_nothing_written(tmp_path, capsys, name, args, words):
    (tmp_path / "empty").mkdir()
    (tmp_path / "a_file").write_text("x")
    corpus = _corpus(tmp_path, 2, "x = 1\n")
    subs = {"{tmp}": str(tmp_path / "empty"), "{file}": str(tmp_path / "a_file"), "{corpus}": corpus}
    for key, value in subs.items():
        args = [a.replace(key, value) for a in args]
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    assert _cli(name, args, tmp_path / "out") == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(("config error: ", "data error: ")), err
    assert "Traceback" not in err and out == ""
    for word in words:
        assert word in lines[0], (word, lines[0])
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before  # nothing written anywhere


@pytest.mark.parametrize("name", ["cost", "train"])
def test_a_bad_host_memory_setting_is_one_line_exit_2(tmp_path, capsys, monkeypatch, name):
    monkeypatch.setenv("NORMJAX_KEEP_FREED_MEMORY", "yes")
    assert _cli(name, [], tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert err.strip() == "config error: NORMJAX_KEEP_FREED_MEMORY must be 0 or 1, got 'yes'", err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", MAINS)
def test_print_config_validates_prints_json_and_writes_nothing(tmp_path, capsys, name):
    assert (
        _cli(name, ["--print_config", "--config.seed=3" if name in ("cost", "diagnose") else "--progress"], tmp_path)
        == 0
    )
    printed = json.loads(capsys.readouterr().out)
    assert printed and list(tmp_path.iterdir()) == []
    if name == "train":  # the resolved config: the model's vocab_size and max_len come from the data
        assert printed["model"]["vocab_size"] > 0 and printed["model"]["max_len"] == printed["data"]["max_len"]


def test_comma_lists_set_tuple_keys(tmp_path, capsys):
    assert (
        _cli("hidden_norms", ["--config.placements=post,pre", "--config.settings=real", "--print_config"], tmp_path)
        == 0
    )
    printed = json.loads(capsys.readouterr().out)
    assert printed["placements"] == ["post", "pre"] and printed["settings"] == ["real"]
    assert _cli("depth_scaling", ["--config.depths=2,4", "--print_config"], tmp_path) == 0
    assert json.loads(capsys.readouterr().out)["depths"] == [2, 4]


def test_an_override_of_a_swept_key_replaces_the_axis(tmp_path, capsys):
    assert _cli("warmup_ablation", ["--config.train.lr=0.002", "--print_config"], tmp_path) == 0
    axes = json.loads(capsys.readouterr().out)["sweep"]["axes"]
    preset = len(warmup_ablation_config.get_config("quick").sweep.axes["train.warmup_steps"])
    assert axes["train.lr"] == [0.002] and len(axes["train.warmup_steps"]) == preset > 1


def test_the_grid_needs_the_axes_of_the_heat_maps(tmp_path, capsys):
    config = tmp_path / "grid.py"
    config.write_text(
        "from normjax.studies.warmup_ablation import config as warmup_ablation\n"
        "def get_config():\n"
        "    c = warmup_ablation.get_config('quick')\n"
        "    del c.sweep.axes['train.lr']\n"
        "    return c\n"
    )
    assert _cli("warmup_ablation", [f"--config={config}"], tmp_path / "out") == 2
    assert "missing train.lr" in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_sweep_folder_names_stay_inside_the_sweep_folder(tmp_path):
    config = default_config()
    config.train.warmup_steps = 0
    config.sweep.axes = sweep_axes({"data.path": ["../../../escape", "/abs/path", ".."], "train.lr": [1e-3]})
    names = [r.name for r in expand(config)]
    assert len(set(names)) == 3
    for name in names:
        path = os.path.normpath(os.path.join(tmp_path, name))
        assert os.path.dirname(path) == str(tmp_path) and "/" not in name and not name.startswith(".")
    assert path_component("placement=post,lr=0.001") == "placement=post,lr=0.001"  # plain names stay as they are
    assert path_component("a/b") != path_component("a_b")


@pytest.mark.parametrize(
    "fields", [dict(theory="False"), dict(scan_layers="no"), dict(final_norm=1), dict(deepnorm_alpha=float("inf"))]
)
def test_model_config_booleans_are_booleans_and_numbers_finite(fields):
    with pytest.raises(ValueError, match=next(iter(fields))):
        normjax.ModelConfig(**fields)


def test_memory_check_names_the_estimate_and_the_memory():
    cfg = normjax.ModelConfig(d_model=64, num_heads=4, d_ff=256, num_layers=2, vocab_size=256)
    need = memory.estimate_bytes(cfg, rows=8, seq_len=16)
    assert need["params"] >= 4 * 4 * memory.param_count(cfg)  # float32 params, grads, two Adam moments
    memory.check_fits(cfg, 8, 16, available=need["total"])
    with pytest.raises(ConfigError, match=r"needs at least .* GiB .* memory is"):
        memory.check_fits(cfg, 8, 16, available=need["total"] - 1)


def test_a_cli_runs_from_another_directory(tmp_path):
    """python -m normjax.studies.<name> from a temporary folder: the packaged preset, results written."""
    tiny = "--config.num_layers=2 --config.d_model=16 --config.d_ff=32 --config.num_heads=2 --config.vocab_size=32"
    args = [*tiny.split(), "--config.seq_len=4", "--config.batch_size=2", "--config.num_seeds=1"]
    args += ["--config.placements=pre", "--config.settings=real", "--workdir=out", "--progress=false"]
    env = os.environ | {"PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run(
        [sys.executable, "-m", "normjax.studies.hidden_norms", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "hidden_norms" / "results.json").is_file()
    assert "model/s" not in proc.stderr and "it/s" not in proc.stderr  # --progress=false: no bars


@pytest.mark.parametrize("shape", [(5,), (1, 9), (0, 4), (2, 0)])
def test_token_shapes_the_model_cannot_take_are_named(shape):
    model = normjax.Transformer(normjax.ModelConfig(max_len=8, d_model=16, d_ff=32, num_layers=1), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=rf"got shape \({shape[0]},"):
        model(jnp.zeros(shape, jnp.int32))


def _tiny(arch: str = "decoder"):
    cfg = normjax.ModelConfig(arch=arch, max_len=8, d_model=16, d_ff=32, num_layers=1, num_heads=2, vocab_size=32)
    return normjax.Transformer(cfg, rngs=nnx.Rngs(0))


T_BT, M_BT = jnp.ones((2, 4), jnp.int32), jnp.ones((2, 4), bool)
MODEL_INPUTS = {  # before: AttributeError inside flax, IndexError or a broadcasting TypeError inside attention
    "tokens a list": (lambda m: m([[1, 2, 3]]), TypeError, "tokens must be a jax or numpy array, got a list"),
    "tokens a tuple": (lambda m: m(((1, 2),)), TypeError, "tokens must be a jax or numpy array, got a tuple"),
    "mask a list": (lambda m: m(T_BT, padding_mask=[[True] * 4] * 2), TypeError, "padding_mask must be a jax or"),
    "mask (2, 5)": (lambda m: m(T_BT, padding_mask=M_BT[:, :1].repeat(5, 1)), ValueError, r"= \(2, 4\); got \(2, 5\)"),
    "mask (4,)": (lambda m: m(T_BT, padding_mask=M_BT[0]), ValueError, r"padding_mask must have .* got \(4,\)"),
    "mask (3, 4)": (lambda m: m(T_BT, padding_mask=M_BT[:1].repeat(3, 0)), ValueError, r"got \(3, 4\)"),
    "mask float": (lambda m: m(T_BT, padding_mask=M_BT.astype(float)), TypeError, "bool .* or integer 0/1"),
}
SEQ2SEQ_INPUTS = {
    "src a list": (lambda m: m([[1, 2]], T_BT), TypeError, "tokens must be a jax or numpy array"),
    "src_mask (2, 3)": (lambda m: m(T_BT, T_BT, src_mask=M_BT[:, :3]), ValueError, r"src_mask must .* got \(2, 3\)"),
    "tgt_mask a tuple": (lambda m: m(T_BT, T_BT, tgt_mask=((True,) * 4,) * 2), TypeError, "tgt_mask must be a jax"),
}


@pytest.mark.parametrize("case", [*MODEL_INPUTS, *SEQ2SEQ_INPUTS])
def test_model_inputs_of_the_wrong_kind_are_named(case):
    call, error, words = MODEL_INPUTS.get(case) or SEQ2SEQ_INPUTS[case]
    with pytest.raises(error, match=words) as e:
        call(_tiny("encoder_decoder" if case in SEQ2SEQ_INPUTS else "decoder"))
    assert "\n" not in str(e.value)


def test_an_integer_mask_means_nonzero_is_a_real_token():
    """0/1 (or any nonzero) integer masks equal the bool mask; before, a 2 was `&`-ed with the causal mask to 0."""
    model, mask = _tiny(), jnp.array([[1, 1, 0, 0], [1, 1, 1, 0]], bool)
    want = model(T_BT, padding_mask=mask)
    assert jnp.array_equal(model(T_BT, padding_mask=mask.astype(jnp.int32) * 2), want)


@pytest.mark.parametrize("kind", ["folder", "link outside"])
def test_the_report_cli_refuses_a_report_md_it_cannot_replace(tmp_path, kind):
    """Before: REPORT.md a folder -> IsADirectoryError traceback; a link -> the file outside replaced, exit 0."""
    outside, report = tmp_path / "outside.md", tmp_path / "work" / "REPORT.md"
    outside.write_text("precious\n")
    report.parent.mkdir()
    report.mkdir() if kind == "folder" else report.symlink_to(outside)
    env = os.environ | {"PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
    cmd = [sys.executable, "-m", "normjax.studies.report_cli", f"--workdir={report.parent}"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"error: {report} is a"), proc.stderr
    assert outside.read_text() == "precious\n"
