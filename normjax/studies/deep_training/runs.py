"""deep_training's runs: the byte-level LM, one training run with its probes (data and hparams: studies.byte_lm)."""

from __future__ import annotations

import dataclasses
import functools
import math
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import normjax
from normjax import specs
from normjax import train as nt
from normjax.probes.param_probes import model_update
from normjax.studies.byte_lm import data, hparams, model_config
from normjax.train.loop import Probe, train_probed

BETA_KERNELS = ("ffn/fc1/kernel", "ffn/fc2/kernel", "attn/value/kernel", "attn/out/kernel")  # DeepNorm's beta
UNSCALED_KERNELS = ("attn/query/kernel", "attn/key/kernel")


def main_probe(config, fn=None) -> Probe:
    """The main run's probe: every step up to early_steps, then every probe_every steps, and the last one."""
    return Probe(config.probe_every, fn, frozenset(range(config.early_steps + 1)))


def probe_steps(config) -> list[int]:
    """The steps main_probe measures in a run that does not diverge."""
    return [t for t in range(config.num_steps + 1) if main_probe(config).due(t, config.num_steps)]


def _stream_ms(streams, mask_BT) -> jax.Array:
    """(L + 1,): per residual stream x_l, the mean over real tokens of ||x_l||^2 / d."""
    w_BT = mask_BT.astype(jnp.float32)
    return jnp.stack(
        [
            (jnp.sum(x.astype(jnp.float32) ** 2, -1) / x.shape[-1] * w_BT).sum() / jnp.maximum(w_BT.sum(), 1.0)
            for x in streams
        ]
    )


@functools.partial(jax.jit, static_argnums=0)
def _measure(spec, state, fixed):
    """The engine's diagnostics, F(x, theta) and the stream norms of `state` on the fixed batch."""
    diag = nt.diagnostics(spec.graphdef, spec.task, state.params, state.consts, fixed)
    model = nnx.merge(spec.graphdef, state.params, state.consts)
    logits_BTV, probes = normjax.probe(model, fixed["tokens"], padding_mask=fixed["mask"])
    return diag, logits_BTV, _stream_ms(probes["decoder"].streams, fixed["mask"])


@functools.partial(jax.jit, static_argnums=0)
def _alphas(graphdef, state, tokens_BT):
    """Per block, <z - G(x), x>/<x, x> at the attention LN input z = alpha x + G(x) (one compile per model shape)."""
    sp = normjax.probe(nnx.merge(graphdef, state), tokens_BT)[1]["decoder"]
    return jnp.stack(
        [
            jnp.sum((n["attn.post"] - b["attn"]) * x) / jnp.sum(x * x)
            for x, n, b in zip(sp.streams[:-1], sp.norm_inputs, sp.branch_outputs, strict=True)
        ]
    )


def deepnorm_init(model, tokens_BT) -> dict:
    """D1 at init: alpha measured per block as <z - G(x), x>/<x, x> at the attention LN input z = alpha x + G(x),
    and the std of each kernel over its Xavier std sqrt(2/(fan_in + fan_out)), pooled over layers."""
    graphdef, state = nnx.split(model)
    layers = normjax.layer_params(nnx.state(model, nnx.Param), model, "decoder")
    ratios, counts = {}, {}
    for name in BETA_KERNELS + UNSCALED_KERNELS:
        w_LIO = np.stack([np.asarray(p[name]) for p in layers])
        ratios[name] = float(w_LIO.std() / math.sqrt(2 / sum(w_LIO.shape[-2:])))
        counts[name] = int(w_LIO.size)
    return {"alpha": np.asarray(_alphas(graphdef, state, tokens_BT)), "std_over_xavier": ratios, "counts": counts}


def init_record(model, run: str, tokens_BT) -> dict:
    """What the claims check at init: DeepNorm's constants (D1), DyT's alpha_0 (R6)."""
    spec = specs.parse(run)
    out = {"num_params": sum(int(x.size) for x in jax.tree.leaves(nnx.state(model, nnx.Param)))}
    if spec.placement == "deepnorm":
        out["deepnorm"] = deepnorm_init(model, tokens_BT)
    if spec.norm == "dyt":
        layers = normjax.layer_params(nnx.state(model, nnx.Param), model, "decoder")
        out["dyt_alpha0"] = [float(v) for p in layers for k, v in p.items() if k.endswith("norm/alpha")]
    return out


def _train(spec, state, batches, fixed, num_steps: int, probe: Probe, check_every: int):
    """num_steps updates of `state` by the one trainer (normjax.train.loop.train_probed); F(x, theta_t), LN inputs,
    layer gradients and stream norms measured on `fixed` at `probe`'s steps (its fn is replaced).

    Returns (probes, per-step metrics, final state); stops early once the engine flags divergence.
    """
    measure = lambda t, state, batch: jax.device_get(_measure(spec, state, fixed))
    state, metrics, (measured,) = train_probed(
        spec, state, batches.batch, num_steps, [dataclasses.replace(probe, fn=measure)], check_every
    )
    _, (_, logits0, _) = measured[0]  # at step 0
    probes = {"step": [], "update": [], "ln_input_rms": [], "layer_grad_norm": [], "stream_ms": []}
    probes["output_norm"] = model_update(logits0, np.zeros_like(logits0))
    for t, (diag, logits_BTV, stream_ms) in measured:
        probes["step"].append(t)
        probes["update"].append(model_update(logits_BTV, logits0))
        probes["ln_input_rms"].append(float(diag["norm_input_rms/decoder"]))
        probes["layer_grad_norm"].append(np.asarray(diag["grad_norm/decoder"]))
        probes["stream_ms"].append(np.asarray(stream_ms))
    return probes, metrics, state


def _setup(config, run: str, depth: int, seed: int, schedule: dict):
    """(model config, the seed's model at init, step spec, hyperparameters, batches, fixed batch) of one run."""
    cfg = model_config(config, run, depth, scan_layers=True)  # one compile per run and depth, whatever the seed
    model = normjax.Transformer(cfg, rngs=nnx.Rngs(seed))
    optimizer = nt.OptimizerSpec(config.optimizer, b1=config.b1, b2=config.b2, eps=config.eps)
    spec = nt.StepSpec(nnx.graphdef(model), "lm", schedule["kind"], optimizer)
    hp = hparams(config, cfg.vocab_size, schedule["lr"], schedule["warmup"], schedule["num_steps"])
    return cfg, model, spec, hp, *data(config, seed)


def _main_schedule(config) -> dict:
    return {"lr": config.lr, "warmup": 0, "num_steps": config.num_steps, "kind": "constant"}


def _small_lr_update(config, cfg, spec, hp, seed: int, batches, fixed) -> list:
    """D2's regime: the first early_steps from the seed's init at update_lr (lr is traced: the main run's compiled
    step is reused); the model update ||F(x, theta_t) - F(x, theta_0)|| at steps 0..early_steps."""
    again = nt.init_state(spec, normjax.Transformer(cfg, rngs=nnx.Rngs(seed)), seed, hp | {"lr": config.update_lr})
    every_step, no_check = Probe(1, None), config.early_steps + 1
    return _train(spec, again, batches, fixed, config.early_steps, every_step, no_check)[0]["update"]


def early_update_run(config, run: str, depth: int, seed: int) -> dict:
    """D2's measurement alone, for the seeds beyond num_seeds (`d2_num_seeds`): the same init, batches and
    compiled step as train_run's D2 part, so its "early_update" equals that of a full run of the seed."""
    cfg, _, spec, hp, batches, fixed = _setup(config, run, depth, seed, _main_schedule(config))
    update = _small_lr_update(config, cfg, spec, hp, seed, batches, fixed)
    return {"seed": seed, "early_update": mean_early_update(update)}


def mean_early_update(update: list) -> float:
    """D2's number: the mean model update over steps 1..early_steps (step 0 is the init: 0)."""
    return float(np.mean(np.array(update, float)[1:]))


def train_run(config, run: str, depth: int, seed: int, schedule: dict | None = None) -> dict:
    """Trains one model (init, data order and dropout from `seed`).

    Without `schedule`: config.num_steps at config.lr from the first update, then the first early_steps again
    at update_lr from the same init (D2's regime). With `schedule` (S7: {"lr", "warmup", "num_steps", "kind"}):
    that run only, probed at its first and last step.
    """
    main = schedule is None
    schedule = schedule or _main_schedule(config)
    cfg, model, spec, hp, batches, fixed = _setup(config, run, depth, seed, schedule)
    init = init_record(model, run, fixed["tokens"][:2])
    num_steps, start = schedule["num_steps"], time.time()
    probe = main_probe(config) if main else Probe(num_steps, None)  # S7: the first and the last step
    probes, metrics, state = _train(
        spec, nt.init_state(spec, model, seed, hp), batches, fixed, num_steps, probe, config.divergence_check_every
    )
    diverged = int(state.diverged_at)
    rec = {
        "seed": seed,
        "init": init,
        "probes": probes,
        "diverged_step": diverged if 0 <= diverged <= num_steps else None,
        "loss": [float(m["loss"]) for m in metrics],
        "grad_norm": [float(m["grad_norm"]) for m in metrics],
        "wall_time_s": time.time() - start,
    }
    if main:
        rec["small_lr_update"] = _small_lr_update(config, cfg, spec, hp, seed, batches, fixed)
    return rec


def final_loss(rec: dict, window: int) -> float | None:
    """Mean train loss of the last `window` updates (each batch seen once); None when the run diverged."""
    loss = np.array(rec["loss"], float)
    return None if rec["diverged_step"] is not None else float(np.mean(loss[-window:]))


def summarize(rec: dict, config) -> dict:
    """One run's numbers for the rules: early update, final loss, LN-input peak, gradients, stream norms."""
    p = rec["probes"]
    steps_, update = np.array(p["step"]), np.array(p["update"], float)  # None (JSON for NaN) becomes nan
    early = (steps_ >= 1) & (steps_ <= config.early_steps)
    grads_PL, rms = np.array(p["layer_grad_norm"], float), np.array(p["ln_input_rms"], float)
    ms_PL = np.array(p["stream_ms"], float)
    return {
        "early_update": mean_early_update(rec["small_lr_update"]),
        "early_update_train_lr": float(np.mean(update[early])),
        "first_update_relative": float(update[1] / p["output_norm"]),
        "final_loss": final_loss(rec, config.final_window),
        "diverged_step": rec["diverged_step"],
        "ln_rms_init": float(rms[0]),
        "ln_rms_peak": float(np.nanmax(rms)),
        "grad_bottom_init": float(grads_PL[0, 0]),
        "grad_bottom_end": float(grads_PL[-1, 0]),
        "grad_top_end": float(grads_PL[-1, -1]),
        "stream_ms_init": ms_PL[0].tolist(),  # ||x_l||^2 / d for l = 0..L, at init and after the last update
        "stream_ms_end": ms_PL[-1].tolist(),
    }
