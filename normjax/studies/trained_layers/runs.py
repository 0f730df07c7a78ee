"""trained_layers' runs: one byte LM trained and probed per layer at checkpoints, its blocks measured at the end."""

from __future__ import annotations

import functools
import math
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import normjax
from normjax import jacobian
from normjax import train as nt
from normjax.studies.byte_lm import data, hparams, model_config
from normjax.train.loop import Probe, train_probed

STACK = "decoder"


@functools.lru_cache(maxsize=2)
def _valid(max_bytes: int, seq_len: int, batch_size: int) -> nt.LMBatches:
    valid = nt.load_byte_corpus(max_bytes=max_bytes)["valid"]
    return nt.LMBatches(valid, seq_len, nt.BatchSpec(batch_size=batch_size), shuffle=False)


def held_out_batches(config) -> list[dict]:
    """The first probe_batches batches of the held-out split (every run and checkpoint probes the same ones)."""
    valid = _valid(config.max_bytes, config.seq_len, config.batch_size)
    return [valid.batch(i) for i in range(config.probe_batches)]


def probe_steps(config) -> list[int]:
    """0, probe_every, 2 probe_every, ... and the last step (the state after that many updates)."""
    return sorted(set(range(0, config.num_steps, config.probe_every)) | {config.num_steps})


@functools.partial(jax.jit, static_argnums=0)
def _layer_grads(spec, params, consts, batch) -> tuple[jax.Array, jax.Array]:
    """Per layer, the gradient norm of all its parameters and of its FFN weights (the unsmoothed nll of `batch`)."""
    diag = nt.diagnostics(spec.graphdef, spec.task, params, consts, batch)
    return diag[f"grad_norm/{STACK}"], diag[f"ffn_grad_norm/{STACK}"]


@functools.partial(jax.jit, static_argnums=0)
def _angular(graphdef, params, consts, tokens_BT, mask_BT) -> jax.Array:
    """(L,): per block, the mean over real tokens of arccos(cos(x_l, x_{l+1})) / pi (Gromov et al.'s angular
    distance between a block's input and output, as Mix-LN's and LNS's papers plot it)."""
    model = nnx.merge(graphdef, params, consts)
    streams = normjax.probe(model, tokens_BT, padding_mask=mask_BT)[1][STACK].streams
    w_BT = mask_BT.astype(jnp.float32)
    out = []
    for x, y in zip(streams[:-1], streams[1:], strict=True):
        x, y = x.astype(jnp.float32), y.astype(jnp.float32)
        cos = jnp.sum(x * y, -1) / (jnp.linalg.norm(x, axis=-1) * jnp.linalg.norm(y, axis=-1))
        out.append((jnp.arccos(jnp.clip(cos, -1.0, 1.0)) / jnp.pi * w_BT).sum() / jnp.maximum(w_BT.sum(), 1.0))
    return jnp.stack(out)


def block_dev(model, tokens_T) -> list[float]:
    """||J_l - I||_2 of every block at one sequence (matrix-free Lanczos on x -> f_l(x) - x, the inputs of the
    blocks the model's own forward pass gives)."""
    x, out = normjax.embed(model, tokens_T[None], STACK)[0], []
    for l in range(normjax.num_blocks(model, STACK)):
        f = normjax.block_fn(model, l, STACK)
        out.append(float(jacobian.spectral_norm(lambda x, f=f: f(x) - x, x, method="lanczos")))
        x = f(x)
    return out


def _probe(spec, state, held_out: list[dict]) -> dict:
    """Layer gradient norms (mean over the held-out batches) and the angular distances of the state's blocks."""
    grads = [jax.device_get(_layer_grads(spec, state.params, state.consts, b)) for b in held_out]
    first = held_out[0]
    angle = _angular(spec.graphdef, state.params, state.consts, first["tokens"], first["mask"])
    return {
        "layer_grad_norm": np.mean([g for g, _ in grads], axis=0).tolist(),
        "ffn_grad_norm": np.mean([f for _, f in grads], axis=0).tolist(),
        "angular": np.asarray(angle).tolist(),
    }


def train_run(config, run: str, seed: int) -> dict:
    """Trains one model (init, data order from `seed`): config.num_steps at config.lr after config.warmup steps
    of linear warmup (then constant), probed at probe_steps; ||J_l - I||_2 per block at init and at the end."""
    cfg = model_config(config, run, config.depth, scan_layers=False)  # mixln's layers are wired differently
    model = normjax.Transformer(cfg, rngs=nnx.Rngs(seed))
    batches, held_out = data(config, seed)[0], held_out_batches(config)
    jac_tokens = held_out[0]["tokens"][0, : config.jacobian_len]
    optimizer = nt.OptimizerSpec(config.optimizer, b1=config.b1, b2=config.b2, eps=config.eps)
    spec = nt.StepSpec(nnx.graphdef(model), "lm", "constant", optimizer)
    hp = hparams(config, cfg.vocab_size, config.lr, config.warmup, config.num_steps)
    start = time.time()
    dev_init = block_dev(model, jac_tokens)
    state = nt.init_state(spec, model, seed, hp)
    probe = Probe(config.probe_every, lambda step, state, batch: _probe(spec, state, held_out))
    state, metrics, (measured,) = train_probed(
        spec, state, batches.batch, config.num_steps, [probe], config.divergence_check_every
    )
    probes = {"step": [t for t, _ in measured]} | {
        key: [m[key] for _, m in measured] for key in ("layer_grad_norm", "ffn_grad_norm", "angular")
    }
    losses = [float(m["loss"]) for m in metrics]
    diverged = int(state.diverged_at)
    trained = nnx.merge(spec.graphdef, state.params, state.consts)
    finite = all(math.isfinite(v) for v in losses)
    return {
        "seed": seed,
        "probes": probes,
        "loss": losses,
        "diverged_step": diverged if diverged >= 0 else None,
        "block_dev_init": dev_init,
        "block_dev_end": block_dev(trained, jac_tokens) if finite and diverged < 0 else None,
        "wall_time_s": time.time() - start,
    }
