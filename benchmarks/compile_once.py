"""Compile once per structure: Jacobian tools on every block of a model, on the trained model, model-wide probes.

  python -m benchmarks.compile_once --json_out=/tmp/compile_once.json

A Post-LN decoder (d 64, 4 heads, FFN 256, float32, --num_layers blocks) at init; each block's Jacobian is taken
on --seq_len tokens of one sequence (n = seq_len * 64). Rows (uses only entry points that exist before and after
the compile-once change, so the same script measures both):
  block_fn: `jacobian.spectral_norm(normjax.block_fn(model, l), x_l)` for every block l, per method: "first" is
    block 0 (compile included), "later" the mean over the other blocks, "ratio" later / first (target <= 0.05),
    "repeat" block 0 again with the same function and values (the compute floor: no trace or compile can be saved).
  trained: after every weight is scaled by 1.1 (a stand-in for training), block 0 again through the same
    function object: its time, and "stale" = whether it returned the value from before the update (checked
    against a fresh jax.jacfwd + NumPy SVD).
  block_jacobian_norms / end_to_end_jacobians: `model_jacobians` on the first 4 blocks' model, wall time.
"""

import json
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags
from flax import nnx

import normjax
from normjax import jacobian
from normjax.probes import model_jacobians

_NUM_LAYERS = flags.DEFINE_integer("num_layers", 8, "Blocks in the model of the block_fn rows.")
_SEQ_LEN = flags.DEFINE_integer("seq_len", 8, "Tokens per Jacobian: n = seq_len * 64.")
_METHODS = flags.DEFINE_list("methods", ["exact", "lanczos"], "spectral_norm methods for the block_fn rows.")
_JSON_OUT = flags.DEFINE_string("json_out", None, "Write all rows to this JSON file.")


def make_model(num_layers: int):
    cfg = normjax.ModelConfig(
        arch="decoder", vocab_size=256, d_model=64, num_heads=4, d_ff=256, num_layers=num_layers, placement="post"
    )
    return normjax.Transformer(cfg, rngs=nnx.Rngs(0))


def timed(fn):
    t = time.perf_counter()
    out = jax.block_until_ready(fn())
    return out, time.perf_counter() - t


def fresh_norm(model, l, x):
    """||J|| of block l from a new jitted jax.jacfwd and NumPy (nothing cached from before)."""
    J = jax.jit(jax.jacfwd(lambda v: normjax.block_fn(model, l)(v)))(x)
    return float(np.linalg.norm(np.asarray(J).reshape(x.size, x.size), 2))


def block_rows(method: str) -> list[dict]:
    model = make_model(_NUM_LAYERS.value)
    tokens = jax.random.randint(jax.random.key(0), (1, _SEQ_LEN.value), 0, 256)
    streams = normjax.probe(model, tokens)[1]["decoder"].streams
    fns = [normjax.block_fn(model, l) for l in range(_NUM_LAYERS.value)]
    times = [
        timed(lambda l=l: jacobian.spectral_norm(fns[l], streams[l][0], method=method))[1] for l in range(len(fns))
    ]
    before, repeat = timed(lambda: jacobian.spectral_norm(fns[0], streams[0][0], method=method))
    before = float(before)
    state = nnx.state(model, nnx.Param)
    nnx.update(model, jax.tree.map(lambda w: 1.1 * w, state))
    after, t_after = timed(lambda: jacobian.spectral_norm(fns[0], streams[0][0], method=method))
    want = fresh_norm(model, 0, streams[0][0])
    first, later = times[0], float(np.mean(times[1:]))
    return [
        {
            "row": "block_fn",
            "method": method,
            "first_s": first,
            "later_s": later,
            "ratio": later / first,
            "repeat_s": repeat,
        },
        {
            "row": "trained",
            "method": method,
            "time_s": t_after,
            "value": float(after),
            "fresh_exact": want,
            "stale": bool(abs(float(after) - want) > 1e-3 * want and abs(float(after) - before) < 1e-6 * before),
        },
    ]


def model_rows() -> list[dict]:
    model = make_model(4)
    tokens = jax.random.randint(jax.random.key(0), (1, _SEQ_LEN.value), 0, 256)
    _, t_blocks = timed(lambda: model_jacobians.block_jacobian_norms(model, tokens)["decoder"]["block"])
    _, t_e2e = timed(lambda: model_jacobians.end_to_end_jacobians(model, tokens)["decoder"]["spectral"])
    return [
        {"row": "block_jacobian_norms (4 blocks)", "time_s": t_blocks},
        {"row": "end_to_end_jacobians (4 blocks)", "time_s": t_e2e},
    ]


def main(argv):
    del argv
    rows = [r for m in _METHODS.value for r in block_rows(m)] + model_rows()
    for r in rows:
        print(" | ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()))
    if _JSON_OUT.value:
        with open(_JSON_OUT.value, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    jnp.zeros(())  # initialize the backend outside the timings
    app.run(main)
