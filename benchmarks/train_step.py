"""Training step: tokens/s of normjax vs the PyTorch layers a user writes from the seed notes, and FLOP/s vs peak.

  pip install -r benchmarks/requirements.txt     # PyTorch, CPU build (benchmarks only)
  python -m benchmarks.train_step [--sizes=512x8x2048,512x4x1024] [--placements=post,pre] [--layers=6]
                                  [--impls=normjax,normjax_scan,normjax_chained,seed,torch]
                                  [--batch=16] [--length=64] [--rounds=5] [--json_out=FILE]

One network per (size, placement), in up to five implementations: normjax (an encoder Transformer, jitted
value_and_grad + optax.adam; its layers in a Python loop, or scanned with `scan_layers=True`), the seed's
PyTorch PreNorm/PostNormEncoderLayer and torch.nn.TransformerEncoderLayer(norm_first=...). `normjax_chained`
is the looped layout compiled without `normjax.cotangent.materialize_cotangent` (the step before it), for a
before/after in one run. Every normjax placement may be named; the PyTorch references are post, pre and ngpt
(`torch_reference.NGPTLayer`, equal to normjax's nGPT block: tests/test_torch_reference.py); any other
placement's "vs torch" is against the PyTorch Pre-LN step of the same size, timed in the same rounds (column
`ref`): a stricter bar for placements with more norms or gates. Each is
embedding * sqrt(d) + sinusoidal positions, the layers, a final LayerNorm for Pre-LN, a tied head and
cross-entropy on random tokens; forward + backward + Adam, same sizes, same threads (torch gets as many as
XLA: every core). Implementations are timed in interleaved rounds (median over rounds) so machine noise hits
them alike.

Achieved FLOP/s counts the model's matmul FLOPs (2mnk; backward = 2x forward) over the median step time;
the peak is the best float32 matmul FLOP/s measured in this run (jax and torch, square and model shapes).
"""

import json
import os
import statistics
import time
from functools import partial
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import app, flags
from flax import nnx

import normjax
from normjax.cotangent import materialize_cotangent

_SIZES = flags.DEFINE_list("sizes", ["512x8x2048", "512x4x1024"], "d_model x heads x d_ff.")
_PLACEMENTS = flags.DEFINE_list("placements", ["post", "pre"], "normjax placements (PyTorch: post, pre, ngpt).")
_IMPLS = flags.DEFINE_list(
    "impls",
    ["normjax", "normjax_scan", "seed", "torch"],
    "normjax (layers in a Python loop), normjax_scan (scan_layers=True), normjax_chained (the loop without "
    "materialize_cotangent), seed (the seed's PyTorch layers), torch (nn.TransformerEncoderLayer).",
)
_LAYERS = flags.DEFINE_integer("layers", 6, "Encoder layers.")
_BATCH = flags.DEFINE_integer("batch", 16, "Sequences per step.")
_LEN = flags.DEFINE_integer("length", 64, "Tokens per sequence.")
_VOCAB = flags.DEFINE_integer("vocab", 256, "Vocabulary (small, so the layers dominate).")
_DROPOUT = flags.DEFINE_float("dropout", 0.0, "Dropout rate in every implementation.")
_ROUNDS = flags.DEFINE_integer("rounds", 5, "Interleaved timing rounds.")
_STEPS = flags.DEFINE_integer("steps_per_round", 2, "Timed steps per implementation per round.")
_JSON = flags.DEFINE_string("json_out", None, "Write rows and the peak as JSON here too.")

PEAK_SHAPES = ((2048, 2048, 2048), (1024, 512, 2048), (1024, 2048, 512))


def model_flops(d: int, d_ff: int, layers: int, batch: int, length: int, vocab: int) -> float:
    """Matmul FLOPs of one training step (forward x 3): projections, attention scores/values, FFN, head."""
    tokens = batch * length
    per_layer = 2 * tokens * (4 * d * d + 2 * d * d_ff) + 2 * 2 * batch * length * length * d
    return 3.0 * (layers * per_layer + 2 * tokens * d * vocab)


def best_rate(fn, flops: float, repeats: int = 5) -> float:
    """FLOP/s of the fastest of `repeats` calls of `fn` (first call excluded)."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return flops / best


def matmul_peak() -> dict:
    """Best float32 matmul FLOP/s of jax and of torch (when installed) over PEAK_SHAPES."""
    use_torch = "seed" in _IMPLS.value or "torch" in _IMPLS.value
    dot = jax.jit(jnp.dot)
    rates = {}
    for m, k, n in PEAK_SHAPES:
        a, b = jax.random.normal(jax.random.key(0), (m, k)), jax.random.normal(jax.random.key(1), (k, n))
        rates[f"jax {m}x{k}x{n}"] = best_rate(
            partial(lambda a, b: dot(a, b).block_until_ready(), a, b), 2.0 * m * k * n
        )
        if use_torch:
            import torch

            ta, tb = torch.from_numpy(np.array(a)), torch.from_numpy(np.array(b))
            rates[f"torch {m}x{k}x{n}"] = best_rate(partial(torch.mm, ta, tb), 2.0 * m * k * n)
    return rates


NORMJAX_IMPLS = ("normjax", "normjax_scan", "normjax_chained")
TORCH_IMPLS = ("seed", "torch")


def torch_placement(placement: str) -> str:
    """The PyTorch reference for a normjax placement: itself for post, pre and ngpt, else Pre-LN."""
    return placement if placement in ("post", "pre", "ngpt") else "pre"


def normjax_step(d, heads, d_ff, placement, impl, tokens, labels):
    """A zero-argument callable doing one normjax train step (state kept inside)."""
    cfg = normjax.ModelConfig(
        arch="encoder",
        vocab_size=_VOCAB.value,
        d_model=d,
        num_heads=heads,
        d_ff=d_ff,
        num_layers=_LAYERS.value,
        placement=placement,
        dropout=_DROPOUT.value,
        max_len=_LEN.value,
        scan_layers=impl == "normjax_scan",
    )
    graphdef, params, rest = nnx.split(normjax.Transformer(cfg, rngs=nnx.Rngs(0)), nnx.Param, ...)
    optimizer = optax.adam(1e-4)
    use_dropout = _DROPOUT.value > 0

    def loss(p, key):
        logits = nnx.merge(graphdef, p, rest)(tokens, dropout_rng=key if use_dropout else None)
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

    @jax.jit
    def step(p, opt_state, key):
        key, sub = jax.random.split(key)
        value, grads = jax.value_and_grad(loss)(p, sub)
        updates, opt_state = optimizer.update(grads, opt_state, p)
        return optax.apply_updates(p, updates), opt_state, key, value

    state = [params, optimizer.init(params), jax.random.key(0)]
    compiled = []

    def run():
        if not compiled:  # the first call compiles (timed as "first s"), chained with the identity in its place
            replacement = (lambda x: x) if impl == "normjax_chained" else materialize_cotangent
            with mock.patch.object(normjax.blocks, "materialize_cotangent", replacement):
                compiled.append(step.lower(*state).compile())
        params, opt_state, key, value = compiled[0](*state)
        state[:] = [params, opt_state, key]
        return float(value)

    return run


def torch_step(kind, d, heads, d_ff, placement, tokens, labels):
    """A zero-argument callable doing one PyTorch eager train step."""
    import torch

    from benchmarks.torch_reference import TokenModel

    torch.manual_seed(0)
    model = TokenModel(kind, _VOCAB.value, d, heads, d_ff, _LAYERS.value, _DROPOUT.value, placement, _LEN.value).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    tokens_t = torch.from_numpy(np.asarray(tokens, np.int64))
    labels_t = torch.from_numpy(np.asarray(labels, np.int64)).reshape(-1)

    def run():
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(tokens_t).reshape(-1, _VOCAB.value), labels_t)
        loss.backward()
        optimizer.step()
        return loss.item()

    return run


def make_steps(d, heads, d_ff, placement) -> dict:
    keys = jax.random.split(jax.random.key(1))
    tokens = jax.random.randint(keys[0], (_BATCH.value, _LEN.value), 0, _VOCAB.value)
    labels = jax.random.randint(keys[1], (_BATCH.value, _LEN.value), 0, _VOCAB.value)
    steps = {}
    for impl in _IMPLS.value:
        if impl in NORMJAX_IMPLS:
            steps[impl] = normjax_step(d, heads, d_ff, placement, impl, tokens, labels)
        elif impl in TORCH_IMPLS:
            steps[impl] = torch_step(impl, d, heads, d_ff, torch_placement(placement), tokens, labels)
        else:
            raise app.UsageError(f"--impls: unknown {impl!r}; valid: {', '.join(NORMJAX_IMPLS + TORCH_IMPLS)}")
    return steps


def time_interleaved(steps: dict) -> dict:
    """{impl: (median seconds per step, first-call seconds)} over interleaved rounds."""
    first = {}
    for impl, run in steps.items():
        start = time.perf_counter()
        run()
        first[impl] = time.perf_counter() - start
    samples = {impl: [] for impl in steps}
    for _ in range(_ROUNDS.value):
        for impl, run in steps.items():
            start = time.perf_counter()
            for _ in range(_STEPS.value):
                run()
            samples[impl].append((time.perf_counter() - start) / _STEPS.value)
    return {impl: (statistics.median(s), first[impl]) for impl, s in samples.items()}


def parse_size(text: str) -> tuple[int, int, int]:
    try:
        d, heads, d_ff = (int(v) for v in text.split("x"))
    except ValueError:
        raise app.UsageError(f"--sizes: {text!r} is not d_model x heads x d_ff, e.g. 512x8x2048") from None
    return d, heads, d_ff


def main(argv):
    del argv
    sizes = [parse_size(s) for s in _SIZES.value]
    unknown = [p for p in _PLACEMENTS.value if p not in normjax.PLACEMENTS]
    if unknown:
        raise app.UsageError(f"--placements: unknown {unknown}; valid: {', '.join(normjax.PLACEMENTS)}")
    if "seed" in _IMPLS.value or "torch" in _IMPLS.value:
        try:
            import torch
        except ImportError:
            raise app.UsageError("PyTorch is missing: pip install -r benchmarks/requirements.txt") from None
        torch.set_num_threads(os.cpu_count())
    kept = normjax.keep_freed_memory()  # for both frameworks: the process's malloc (NORMJAX_KEEP_FREED_MEMORY=0: off)
    print(f"host memory kept (normjax.keep_freed_memory): {kept}")
    peak_rates = matmul_peak()
    peak = max(peak_rates.values())
    print("matmul GFLOP/s: " + ", ".join(f"{k} {v / 1e9:.1f}" for k, v in peak_rates.items()))
    tokens = _BATCH.value * _LEN.value
    rows = []
    print(
        f"{'size':>12} {'place':>10} {'ref':>4} {'impl':>15} {'step ms':>8} {'first s':>7} {'tok/s':>8} "
        f"{'vs seed':>7} {'vs torch':>8} {'GFLOP/s':>7} {'% peak':>6}"
    )
    for d, heads, d_ff in sizes:
        flops = model_flops(d, d_ff, _LAYERS.value, _BATCH.value, _LEN.value, _VOCAB.value)
        for placement in _PLACEMENTS.value:
            timings = time_interleaved(make_steps(d, heads, d_ff, placement))
            for impl, (step_s, first_s) in timings.items():
                row = {
                    "d_model": d,
                    "heads": heads,
                    "d_ff": d_ff,
                    "placement": placement,
                    "torch_placement": torch_placement(placement),
                    "impl": impl,
                    "step_s": step_s,
                    "first_s": first_s,
                    "tokens_per_s": tokens / step_s,
                    "gflops": flops / step_s / 1e9,
                    "peak_fraction": flops / step_s / peak,
                }
                for ref in ("seed", "torch"):
                    row[f"vs_{ref}"] = timings[ref][0] / step_s if ref in timings else float("nan")
                rows.append(row)
                print(
                    f"{f'{d}/{heads}/{d_ff}':>12} {placement:>10} {torch_placement(placement):>4} {impl:>15} "
                    f"{1e3 * step_s:>8.1f} {first_s:>7.2f} "
                    f"{row['tokens_per_s']:>8.0f} {row['vs_seed']:>7.2f} {row['vs_torch']:>8.2f} "
                    f"{row['gflops']:>7.1f} {100 * row['peak_fraction']:>6.1f}"
                )
    if _JSON.value:
        with open(_JSON.value, "w") as f:
            json.dump(
                {
                    "matmul_flops": peak_rates,
                    "peak_flops": peak,
                    "rows": rows,
                    "machine": f"{os.cpu_count()} cores, jax {jax.__version__}",
                    "host_memory_kept": kept,
                },
                f,
                indent=2,
            )


if __name__ == "__main__":
    app.run(main)
