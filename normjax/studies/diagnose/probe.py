"""diagnose's probe: a short training at the user's lr, warmup and optimizer, measuring early-instability signals."""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import normjax
from normjax import train as nt
from normjax.probes.param_probes import model_update
from normjax.threshold import Threshold
from normjax.train import job, steps
from normjax.train.config_io import RunConfig, as_dict
from normjax.train.loop import Probe, train_probed
from normjax.train.schedules import learning_rate

TASK_OF_ARCH = {"decoder": "bytes_lm", "encoder_decoder": "synthetic"}  # config.data.task "" picks by arch

THRESHOLDS = {
    "update": Threshold(
        10.0,
        "||F(x, theta_t) - F(x, theta_0)|| / ||F(x, theta_0)|| on held-out x, largest over the probe's steps "
        "(DeepNet's early model update). The init logits have rms about 1 per entry and fitting the data moves them "
        "by its log-probabilities, which spread over a few nats: a healthy run moves its output a few times its own "
        "size (a 24-layer Pre-LN decoder that trained: 3.4 at lr 1e-2 without warmup), so only 10x, logit "
        "differences of ~10 nats after tens of steps, is a blow-up and not learning",
    ),
    "ln_growth": Threshold(
        2.0,
        "largest rms ||z|| / sqrt(d) of the norm inputs on the residual path (the '.post' sites: Post-LN, DeepNorm, "
        "Admin) at any probe step over its value at init: such a norm's Jacobian scales as 1 / rms and every "
        "gradient to the layers below passes through it, so a 2x growth halves them (DeepNet's LN-input blow-up; "
        "deep_training's D3 uses the same factor). Branch-input norms (Pre-LN) and the final norm are left out: "
        "the residual path bypasses the first, the second scales every layer's gradient alike",
    ),
    "grad_collapse": Threshold(
        10.0,
        "(bottom-layer / top-layer gradient norm) at init over the same ratio at the probe's last step: the "
        "gradient reaching the first layer shrank 10x relative to the last layer's (Xiong et al.'s gradient "
        "collapse toward the input); the ratio cancels the overall gradient scale, which falls as the loss falls",
    ),
}


def threshold_values() -> dict:
    """{name: value} of THRESHOLDS (the config's defaults under config.thresholds)."""
    return {k: float(t) for k, t in THRESHOLDS.items()}


def run_config(config) -> RunConfig:
    """The training run the probe imitates: config.model, config.data and config.train as experiments.train reads
    them; vocab_size and max_len come from the data; data.task "" is the arch's task (TASK_OF_ARCH).

    Raises:
      ConfigError: naming the key (normjax.train.parse).
    """
    values = as_dict(config)
    model = dict(values["model"]) | {"vocab_size": 0, "max_len": 0}
    data = dict(values["data"])
    if not data.get("task"):
        data["task"] = TASK_OF_ARCH.get(model.get("arch"), "synthetic")
    return nt.parse({"model": model, "data": data, "train": dict(values["train"])})


PATH_SITE = ".post"  # norm sites on the residual path (Post-LN, DeepNorm, Admin, ResiDual's x stream)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _forward(graphdef, kind: str, params, consts, batch):
    """(logits F(x, theta), {stack: largest rms ||z|| / sqrt(d) over the norm inputs on the residual path, 0 when the
    stack has none}), the rms a mean over real tokens as in normjax.train.diagnostics."""
    args, masks, stack_masks = steps._model_inputs(kind, batch)
    logits, probes = normjax.probe(nnx.merge(graphdef, params, consts), *args, **masks)
    rms = {}
    for stack, p in probes.items():
        w_BT = stack_masks[stack].astype(jnp.float32)
        sites = [x for block in p.norm_inputs for name, x in block.items() if name.endswith(PATH_SITE)]
        r = [(jnp.linalg.norm(x, axis=-1) / jnp.sqrt(x.shape[-1]) * w_BT).sum() / w_BT.sum() for x in sites]
        rms[stack] = jnp.max(jnp.stack(r)) if r else jnp.zeros(())
    return logits, rms


def _real(logits_BTV, batch: dict, kind: str) -> np.ndarray:
    """The logits of the real (unpadded) target tokens, (N, V)."""
    mask_BT = batch["tgt_mask"] if kind == "seq2seq" else batch["mask"]
    return np.asarray(logits_BTV, np.float64)[np.asarray(mask_BT, bool)]


def probe(run: RunConfig, num_steps: int) -> dict:
    """Trains `run`'s model for num_steps updates exactly as experiments.train would (same init, data order,
    schedule and optimizer) and probes every step on the first held-out batch x.

    Returns:
      {"step", "lr", "loss": per step; "update": ||F(x, theta_t) - F(x, theta_0)|| / ||F(x, theta_0)||;
      "stacks": {stack: {"ln_input_rms" (every norm site), "path_ln_input_rms" (the residual path's), "grad_bottom",
      "grad_top" (layer 0 and the last layer)}} per step;
      "diverged_step" (None while healthy); the run's setup; "wall_time_s" and "setup_wall_time_s" (data, init,
      compiles and step 0)}.
    """
    start = time.time()
    task, cfg = job.prepare(run)
    model = normjax.Transformer(cfg, rngs=nnx.Rngs(run.train.seed))
    spec = job.step_spec(run, model, task.kind)
    hp = job.hparams(run, cfg)
    state = steps.init_state(spec, model, run.train.seed, hp)
    fns, fixed = job.compiled(), task.valid.batch(0)
    out = {"step": [], "lr": [], "loss": [], "update": [], "stacks": {s: {} for s in cfg.stacks}}
    at = {"logits0": None, "norm0": None, "first": None}

    def measure(t, state, batch):
        if t == 1:
            at["first"] = time.time() - start  # data, model, the compiles of the probe and the step, and step 0
        diag, (logits, path_rms) = jax.device_get(
            (
                fns.diag(spec.graphdef, task.kind, state.params, state.consts, fixed),
                _forward(spec.graphdef, task.kind, state.params, state.consts, fixed),
            )
        )
        logits = _real(logits, fixed, task.kind)
        if at["logits0"] is None:
            at["logits0"], at["norm0"] = logits, model_update(logits, np.zeros_like(logits))
        out["step"].append(t)
        out["update"].append(model_update(logits, at["logits0"]) / at["norm0"])
        for stack, rec in out["stacks"].items():
            grads = np.asarray(diag[f"grad_norm/{stack}"], np.float64)
            rec.setdefault("ln_input_rms", []).append(float(diag[f"norm_input_rms/{stack}"]))  # every site
            rec.setdefault("path_ln_input_rms", []).append(float(path_rms[stack]))
            rec.setdefault("grad_bottom", []).append(float(grads[0]))
            rec.setdefault("grad_top", []).append(float(grads[-1]))

    # every step probed; a diverged run's parameters are frozen from its flag: probed once more, then it stops
    state, metrics, _ = train_probed(spec, state, task.train.batch, num_steps, [Probe(1, measure)])
    for key in ("lr", "loss"):
        out[key] = [float(m[key]) for m in metrics]
    diverged = int(state.diverged_at)
    at["diverged"] = diverged if diverged >= 0 else None
    diverged, norm0, first = at["diverged"], at["norm0"], at["first"]
    t = run.train
    return out | {
        "num_steps": num_steps,
        "diverged_step": diverged,
        "output_norm": float(norm0),
        "setup": {
            "task": run.data.task,
            "lr": t.lr,
            "warmup_steps": t.warmup_steps,
            "schedule": t.schedule,
            "optimizer": f"{t.optimizer} (b1 {t.b1:g}, b2 {t.b2:g})" if t.optimizer != "sgd" else "sgd",
            "batch_size": t.batch_size,
            "seed": t.seed,
            "peak_lr_reached": float(learning_rate(t.schedule, num_steps - 1, hp)) / t.lr,
        },
        "wall_time_s": time.time() - start,
        "setup_wall_time_s": first,  # of wall_time_s: data, init, compiles and step 0
    }


def signals(rec: dict) -> dict:
    """The three numbers the warnings compare with THRESHOLDS (nan where a stack has no norm site)."""
    update = np.asarray([np.nan if u is None else u for u in rec["update"]], np.float64)
    out = {"update": float(np.nanmax(update)) if np.isfinite(update).any() else float("inf"), "stacks": {}}
    for stack, s in rec["stacks"].items():
        rms = np.asarray(s["path_ln_input_rms"], np.float64)
        bottom, top = np.asarray(s["grad_bottom"], np.float64), np.asarray(s["grad_top"], np.float64)
        ratio_init, ratio_end = bottom[0] / top[0], bottom[-1] / top[-1]
        out["stacks"][stack] = {
            "ln_rms_init": float(rms[0]),
            "ln_rms_peak": float(np.nanmax(rms)),
            "ln_growth": float(np.nanmax(rms) / rms[0]) if rms[0] > 0 else float("nan"),  # nan: no norm on the path
            "bottom_over_top_init": float(ratio_init),
            "bottom_over_top_end": float(ratio_end),
            "grad_collapse": float(ratio_init / ratio_end) if ratio_end > 0 else float("inf"),
        }
    return out


def _missing(v) -> bool:
    """None (a nan after a JSON round trip) or nan."""
    return v is None or bool(np.isnan(v))


def _g(v) -> str:
    return "-" if v is None else f"{v:.3g}"


def _x(v: float) -> str:
    return f"{v:.1f}x" if v < 10 else f"{v:.0f}x" if v < 1000 else f"{v:.2g}x"


def summary_line(rec: dict, sig: dict) -> str:
    """What the probe ran and measured, in one line (printed whether or not a warning fires)."""
    s = rec["setup"]
    growth = lambda v: "no norm on the residual path" if _missing(v) else f"residual-path norm inputs {_x(v)}"
    parts = [f"output update {_g(sig['update'])}x its size"] + [
        f"{stack}: {growth(v['ln_growth'])}, bottom/top layer gradient {_g(v['bottom_over_top_init'])} -> "
        f"{_g(v['bottom_over_top_end'])}"
        for stack, v in sig["stacks"].items()
    ]
    reached = "" if s["peak_lr_reached"] >= 1 else f" (the warmup reached {s['peak_lr_reached']:.0%} of the lr)"
    return (
        f"probe: {rec['num_steps']} steps on {s['task']} at lr {s['lr']:g}, warmup {s['warmup_steps']}, "
        f"{s['schedule']}, {s['optimizer']}{reached} in {rec['wall_time_s']:.1f} s: " + "; ".join(parts)
    )


def warnings(rec: dict, thresholds: dict) -> list[str]:
    """Plain-language warnings, each with the measured numbers and the threshold it crossed."""
    sig, s, out = signals(rec), rec["setup"], []
    where = f"in {rec['num_steps']} probe steps at lr {s['lr']:g}, warmup {s['warmup_steps']}"
    if rec["diverged_step"] is not None:
        out.append(f"probe: training diverged at step {rec['diverged_step']} {where}: use warmup or a smaller lr")
    if sig["update"] >= thresholds["update"]:
        out.append(
            f"probe: the output moved {_x(sig['update'])} its own size {where} (||F(x, theta_t) - F(x, theta_0)|| / "
            f"||F(x, theta_0)|| = {sig['update']:.3g} >= {thresholds['update']:g}): DeepNet's early-update "
            "blow-up; use warmup or a smaller lr"
        )
    for stack, v in sig["stacks"].items():
        if v["ln_growth"] >= thresholds["ln_growth"]:
            out.append(
                f"probe: {stack} norm inputs on the residual path grew {_x(v['ln_growth'])} {where} (largest rms "
                f"{v['ln_rms_init']:.3g} -> "
                f"{v['ln_rms_peak']:.3g}, threshold {thresholds['ln_growth']:g}x): gradients through those norms "
                f"shrink as much (DeepNet); use warmup or a smaller lr"
            )
        if v["grad_collapse"] >= thresholds["grad_collapse"]:
            out.append(
                f"probe: {stack} gradient collapsed toward the input {where}: bottom/top layer gradient "
                f"{v['bottom_over_top_init']:.3g} at init -> {v['bottom_over_top_end']:.3g} "
                f"({_x(v['grad_collapse'])} smaller, threshold {thresholds['grad_collapse']:g}x; Xiong et al.): "
                "the first layers stop learning; use warmup or a smaller lr"
            )
    return out
