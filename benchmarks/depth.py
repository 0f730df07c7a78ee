"""Depth: compile time, step time and XLA memory of a train step vs depth, loop vs scan, with and without remat.

  python -m benchmarks.depth [--depths=6,24,96] [--d_model=64] [--layouts=loop,scan] [--flat_optimizer]
                             [--json_out=/tmp/depth.json]

One side-by-side table in one run (absolute times on a shared CPU are noisy; read the ratios). The step is
forward + backward + Adam on a decoder LM, jitted once per configuration, with and without remat. Layouts: loop
(the Python loop, the default), scan (`scan_layers=True`), loop_chained (the loop compiled without
`normjax.cotangent.materialize_cotangent`, the step before it). "per layer" is step time / depth against the
first depth's.
"""

import json
import statistics
import time
from unittest import mock

import jax
import jax.numpy as jnp
import optax
from absl import app, flags
from flax import nnx

import normjax
from normjax.cotangent import materialize_cotangent

_DEPTHS = flags.DEFINE_list("depths", ["6", "24", "96"], "Numbers of layers.")
_D = flags.DEFINE_integer("d_model", 64, "Model width (heads 4, FFN 4d).")
_BATCH = flags.DEFINE_integer("batch", 8, "Sequences per step.")
_LEN = flags.DEFINE_integer("length", 64, "Tokens per sequence.")
_REPEATS = flags.DEFINE_integer("repeats", 5, "Timed steps after the first (compiled) one; the median is reported.")
_FLAT = flags.DEFINE_bool(
    "flat_optimizer",
    False,
    "optax.flatten(adam): one raveled vector instead of one "
    "Adam update per parameter array (as normjax.train's step does).",
)
_LAYOUTS = flags.DEFINE_list("layouts", ["loop", "scan"], "Any of loop, scan, loop_chained.")
_JSON = flags.DEFINE_string("json_out", None, "Write the table as JSON here too.")
LAYOUTS = ("loop", "scan", "loop_chained")


def measure(depth: int, layout: str, remat: bool) -> dict:
    cfg = normjax.ModelConfig(
        arch="decoder",
        vocab_size=256,
        d_model=_D.value,
        num_heads=4,
        d_ff=4 * _D.value,
        num_layers=depth,
        placement="pre",
        scan_layers=layout == "scan",
        remat=remat,
    )
    graphdef, params, rest = nnx.split(normjax.Transformer(cfg, rngs=nnx.Rngs(0)), nnx.Param, ...)
    optimizer = optax.flatten(optax.adam(1e-3)) if _FLAT.value else optax.adam(1e-3)
    tokens = jax.random.randint(jax.random.key(0), (_BATCH.value, _LEN.value + 1), 0, 256)

    def loss(p):
        logits = nnx.merge(graphdef, p, rest)(tokens[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

    @jax.jit
    def step(p, opt_state):
        value, grads = jax.value_and_grad(loss)(p)
        updates, opt_state = optimizer.update(grads, opt_state, p)
        return optax.apply_updates(p, updates), opt_state, value

    opt_state = optimizer.init(params)
    start = time.perf_counter()
    replacement = (lambda x: x) if layout == "loop_chained" else materialize_cotangent
    with mock.patch.object(normjax.blocks, "materialize_cotangent", replacement):
        compiled = step.lower(params, opt_state).compile()
    compile_s = time.perf_counter() - start
    memory = compiled.memory_analysis()
    params, opt_state, value = compiled(params, opt_state)
    jax.block_until_ready(value)
    seconds = []
    for _ in range(_REPEATS.value):  # each step timed alone: the median is not moved by one slow step
        start = time.perf_counter()
        params, opt_state, value = compiled(params, opt_state)
        jax.block_until_ready((params, opt_state, value))
        seconds.append(time.perf_counter() - start)
    return {
        "depth": depth,
        "layout": layout,
        "remat": remat,
        "compile_s": compile_s,
        "step_ms": 1e3 * statistics.median(seconds),
        "temp_mib": getattr(memory, "temp_size_in_bytes", 0) / 2**20,
        "loss": float(jnp.asarray(value)),
    }


def main(argv):
    del argv
    unknown = [layout for layout in _LAYOUTS.value if layout not in LAYOUTS]
    if unknown:
        raise app.UsageError(f"--layouts: unknown {unknown}; valid: {', '.join(LAYOUTS)}")
    kept = normjax.keep_freed_memory()  # NORMJAX_KEEP_FREED_MEMORY=0: off
    print(f"host memory kept (normjax.keep_freed_memory): {kept}")
    rows = [
        measure(int(depth), layout, remat) | {"host_memory_kept": kept}
        for depth in _DEPTHS.value
        for layout in _LAYOUTS.value
        for remat in (False, True)
    ]
    base = {(r["layout"], r["remat"]): r for r in rows if r["depth"] == int(_DEPTHS.value[0])}
    print(
        f"{'depth':>5} {'layout':>12} {'remat':>5} {'compile s':>9} {'x first':>7} {'step ms':>8} "
        f"{'per layer':>9} {'temp MiB':>8}"
    )
    for r in rows:
        first = base[(r["layout"], r["remat"])]
        r["per_layer_vs_first"] = (r["step_ms"] / r["depth"]) / (first["step_ms"] / first["depth"])
        print(
            f"{r['depth']:>5} {r['layout']:>12} {r['remat']!s:>5} {r['compile_s']:>9.2f} "
            f"{r['compile_s'] / first['compile_s']:>7.2f} {r['step_ms']:>8.1f} {r['per_layer_vs_first']:>9.2f} "
            f"{r['temp_mib']:>8.1f}"
        )
    if _JSON.value:
        with open(_JSON.value, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    app.run(main)
