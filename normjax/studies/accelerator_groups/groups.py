"""The accelerator cell groups: named sub-grids of warmup_ablation's `:standard` config that decide verdicts.

Each group is sized from the report's measured per-step costs for one 10-minute call on one H100 (estimates, not
yet timed on one: the issue's 5-20, 10-45 and 15-30 H100-minutes for S5, Fig. 2 and R5/N1, split so that each
part fits). `scripts/accelerator_check.sh GROUP` trains one (benchmarks/accelerator_groups.py) into
WORKDIR/accelerator_groups/<GROUP>/; this study reads those folders (measure.py) and judges them (verdicts.py).
`tiny` shrinks every group to seconds on a CPU (d 16, 2 layers, 6 steps, at most two values of two axes, the
synthetic translation task for Fig. 2): a test of the machinery, never judged.
"""

import dataclasses
import importlib

H = 20  # Adam's second-moment horizon 1/(1 - beta2) at the byte LM's beta2 0.95
S5_LR = 10**-2.5  # the edge cell that decides S5 (warmup_ablation's `edge` grid)


@dataclasses.dataclass(frozen=True)
class Group:
    doc: str
    axes: dict  # dotted config key -> list of values (the sub-grid over warmup_ablation's :standard config)
    translation: bool = False  # Xiong's Fig. 2: an encoder-decoder on the gettext corpus
    read_by: str = ""  # what of the report reads the group's runs (verdicts.py)
    standby: bool = False  # cells the CPU's :standard still runs: no 'waits' row while the group is absent


@dataclasses.dataclass(frozen=True)
class StudyGroup:
    """A whole study at other settings: `overrides` on its :standard preset (`tiny` on its :quick one), its runs
    and cached pieces in the group's folder, judged by that study's own rules for `claims`."""

    doc: str
    study: str
    overrides: dict
    tiny: dict
    claims: tuple[str, ...]
    standby: bool = False  # a study the CPU's :standard still runs: no 'waits' rows while the group is absent

    @property
    def read_by(self) -> str:
        return f"{', '.join(self.claims)} ({self.study}'s rules)"


# deep_training at the other training studies' scale (issue 37 item 6): d 128 (4 heads, FFN 256), 1000 steps, the
# :standard depths, seeds and lr (3e-3, constant: the claims' setting); probes every 100 steps; S7's warmup scaled
# with its run (50 of 250 steps at :standard: 200 of 1000). D2 has its d-128 row in the CPU report already.
DEEP_128 = {"d_model": 128, "num_heads": 4, "d_ff": 256, "num_steps": 1000, "probe_every": 100, "final_window": 100}
DEEP_TINY = {"d_model": 16, "num_heads": 2, "d_ff": 32, "seq_len": 16, "batch_size": 4, "max_bytes": 100_000}
DEEP_TINY |= {"num_steps": 12, "early_steps": 2, "probe_every": 4, "final_window": 4, "num_seeds": 3, "d2_num_seeds": 3}


def _standard_grid(grid: str, doc: str) -> Group:
    """warmup_ablation's :standard sub-grid `grid`, cell for cell (the cells a 150-minute :standard would move to
    an accelerator: benchmarks/standard_budget.py)."""
    from normjax.studies.warmup_ablation import config as study_config

    axes = {k: list(v) for k, v in study_config.get_config("standard").sweep.grids[grid].items()}
    read_by = (
        "S5 at 12 layers and the answer table's 12-layer rows (warmup_ablation's rules, the depth12 groups together)"
    )
    return Group(doc, axes, read_by=read_by, standby=True)


def _s5(placement: str) -> Group:
    return Group(
        f"S5 at 12 layers, {placement}: warmup 0-1000 (0-50H) x 5 seeds at lr 10^-2.5, 3000 steps (20 runs, 1 program)",
        {
            "model.placement": [placement],
            "model.num_layers": [12],
            "train.lr": [S5_LR],
            "train.warmup_steps": [0, 250, 500, 1000],
            "train.decay_start": [1000],  # the fair control: every arm decays from the longest warmup's end
            "train.num_steps": [3000],
            "train.seed": [0, 1, 2, 3, 4],
        },
        read_by="S5 (with the other S5 group)",
    )


def _answer(placements: tuple[str, ...]) -> Group:
    return Group(
        f"the answer grid at 24 layers: {', '.join(placements)} x lr 10^-3.5..10^-2.5, no warmup, 600 steps",
        {
            "model.placement": list(placements),
            "model.num_layers": [24],
            "train.lr": [10**-3.5, 1e-3, 10**-2.5],
            "train.warmup_steps": [0],
        },
        read_by="the answer table at 24 layers (one seed a cell: curves, not judged)",
    )


def _r5_n1(placement: str) -> Group:
    return Group(
        f"R5/N1 at 24 layers, {placement}: 3 seeds, 5000 steps of 32 x 128 bytes (20M tokens), per-layer gradients",
        {
            "model.placement": [placement],
            "model.num_layers": [24],
            "data.seq_len": [128],
            "train.batch_size": [32],
            "train.lr": [1e-3],
            "train.warmup_steps": [8 * H],
            "train.decay_start": [8 * H],
            "train.num_steps": [5000],
            "train.seed": [0, 1, 2],
        },
        read_by="R5 (r5n1_pre and r5n1_mixln: trained_layers' rule on the runs' per-layer gradients); N1 by no rule"
        " yet (it needs the trained blocks' Jacobians, which these runs do not probe)",
    )


GROUPS = {
    "s5_post": _s5("post"),
    "s5_pre": _s5("pre"),
    "xiong_fig2": Group(
        "Xiong et al. Fig. 2 at 6-6 layers, d 128, gettext De-En: post/pre x lr {5e-4, 1e-3} x warmup {0, 400}"
        " x 3 seeds, 1200 steps, one length bucket (24 runs, 2 programs)",
        {"train.lr": [5e-4, 1e-3], "train.seed": [0, 1, 2]},
        translation=True,
        read_by="X7 (one row per lr)",
    ),
    "answer24_a": _answer(("post", "pre", "sandwich", "deepnorm")),
    "answer24_b": _answer(("admin", "rezero", "lns", "mhc")),
    "answer24_c": _answer(("pre_gpas", "sandwich_gpas", "siamese", "mhc_lite")),  # 2025-2026 schemes, not judged
    "r5n1_pre": _r5_n1("pre"),
    "r5n1_mixln": _r5_n1("mixln"),
    "r5n1_lns": _r5_n1("lns"),
    "depth12": _standard_grid(
        "depth",
        ":standard's 12-layer cells: post/pre x lr 10^-3.5, 1e-3, 10^-2.5 x warmup {0, 160} x 3 seeds (36 runs)",
    ),
    "depth12_lr": _standard_grid("depth_lr", ":standard's 12-layer lr curves: post/pre x lr 1e-2, 10^-1.5, no warmup"),
    "depth12_low": _standard_grid("low_lr", ":standard's 12-layer low bracket: post/pre x lr 1e-4 x warmup {0, 160}"),
    "answer_std": StudyGroup(
        "the answer study at :standard (its 60 runs and 12 sharpness runs; resumed piece by piece)",
        "answer",
        {},
        {},  # tiny: its :quick preset (the README's main command runs it)
        ("A1", "A2", "A3", "A4", "A5"),
        standby=True,
    ),
    "trained_std": StudyGroup(
        "trained_layers at :standard (24-layer byte LMs, 5 seeds; resumed piece by piece)",
        "trained_layers",
        {},
        {"num_steps": 12, "warmup": 2, "probe_every": 4, "final_window": 4},
        ("R5", "N1"),
        standby=True,
    ),
    "deep128_main": StudyGroup(
        "deep_training at d 128, 1000 steps: post, pre, deepnorm at 6, 12, 24 layers; tfixup, pre:dyt, sandwich at 6"
        " and 24; 5 seeds (75 runs, resumed piece by piece)",
        "deep_training",
        DEEP_128 | {"d2_num_seeds": 5, "d2_widths": (), "s7_depths": ()},
        DEEP_TINY | {"depths": (2, 3), "runs": ("post", "pre"), "side_runs": (), "s7_depths": ()},
        ("D3", "R3", "R4", "R6"),
    ),
    "deep128_s7": StudyGroup(
        "S7 at d 128: Post-LN and DeepNorm at 6, 18, 36 layers, lr {3e-3, 1e-3}, 200-step warmup, 1000 steps,"
        " 5 seeds (resumed piece by piece)",
        "deep_training",
        DEEP_128 | {"depths": (6,), "runs": ("post",), "side_runs": (), "s7_steps": 1000, "s7_warmup": 200},
        DEEP_TINY
        | {"depths": (2,), "runs": ("post",), "side_runs": (), "s7_depths": (2, 3), "s7_steps": 12}
        | {"s7_warmup": 2},
        ("S7",),
    ),
}
SWEEP_GROUPS = tuple(name for name, group in GROUPS.items() if isinstance(group, Group))  # warmup_ablation's

TINY = {
    "model.d_model": 16,
    "model.num_heads": 2,
    "model.d_ff": 32,
    "model.num_layers": 2,
    "data.seq_len": 16,
    "data.max_bytes": 100_000,
    "data.valid_batches": 2,
    "train.batch_size": 4,
    "train.num_steps": 6,
    "train.log_every": 3,
    "train.eval_every": 6,
    "train.checkpoint_every": 3,
    "train.diag_every": 3,
    "train.bleu_examples": 0,
}
TINY_TRANSLATION = {"data.task": "synthetic", "data.num_train": 200, "data.num_valid": 16, "data.max_len": 12}


def study_config(name: str, tiny: bool = False):
    """The config of study group `name`: its study's :standard preset with its overrides (:quick with its tiny
    ones)."""
    group = GROUPS[name]
    presets = importlib.import_module(f"normjax.studies.{group.study}.config")
    config = presets.get_config("quick" if tiny else "standard")
    config.update_from_flattened_dict(group.tiny if tiny else group.overrides)
    return config


def check_study_config(name: str, tiny: bool = False) -> None:
    """Study group `name`'s config checked as its study's CLI checks one (every key, every run, memory), before
    any compute. Raises ConfigError (one line) naming what is wrong."""
    import jax

    from normjax.experiments.common import Args

    config = study_config(name, tiny)
    main = importlib.import_module(f"normjax.studies.{GROUPS[name].study}.__main__")
    main.EXPERIMENT.validate(Args(config=config, overrides=(), workdir="", progress=False), jax.device_count())


def group_config(name: str, tiny: bool = False):
    """warmup_ablation's :standard config with GROUPS[name] as its only (sub-)grid, vmapped, one worker."""
    from normjax.studies.warmup_ablation import config as study_config  # the study's presets
    from normjax.train.config_io import sweep_axes

    group = GROUPS[name]
    config = study_config.get_config("standard")
    axes = dict(group.axes)
    if group.translation:
        translation = study_config.translation_axes(config, num_layers=6, lr=5e-4, warmup=400, num_steps=1200)
        axes = translation | {"data.buckets": [(32,)]} | axes
    log = max(axes.get("train.num_steps", [config.train.num_steps])[0] // 50, 1)
    # 50 logged points, 10 diagnostics, 5 evaluations; a checkpoint every tenth (what a cut-off can lose)
    axes |= {"train.log_every": [log], "train.diag_every": [5 * log], "train.checkpoint_every": [5 * log]}
    axes["train.eval_every"] = [10 * log]
    if tiny:
        shrink = TINY | (TINY_TRANSLATION if group.translation else {})
        varied = [k for k, v in axes.items() if len(v) > 1][:2]  # two values of two axes: at most 4 runs
        axes = {k: v[:2] if k in varied else v[:1] for k, v in axes.items()} | {k: [v] for k, v in shrink.items()}
        axes["train.warmup_steps"] = [min(w, 3) for w in axes.get("train.warmup_steps", [0])]
        axes["train.decay_start"] = [3]
        if group.translation:
            axes.pop("data.bpe_vocab_size", None)
            axes["data.buckets"] = [(12,)]
    # one-valued keys go into the base config, so a run is named by what varies: grid=<name>,warmup_steps=0,seed=1
    config.update_from_flattened_dict({k: v[0] for k, v in axes.items() if len(v) == 1})
    config.sweep.axes = {}
    config.sweep.grids = {name: sweep_axes({k: v for k, v in axes.items() if len(v) > 1})}
    config.sweep.update(vmap=True, workers=1)
    return config
