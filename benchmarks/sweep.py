"""Sweep throughput: runs one after another (one shared compiled step) vs one vmapped step.

  python -m benchmarks.sweep [--runs=8] [--steps=100] [--d_model=64] [--layers=2]

Prints wall time, steps/s over all runs and the number of compiled train steps for each mode. On the
2-core development machine vmapping 8 small models measured about 0.7x the sequential speed, which is
why `config.sweep.vmap` is off by default.
"""

import tempfile
import time

from absl import app, flags, logging

from normjax import train
from normjax.train.config_io import default_config, sweep_axes

_RUNS = flags.DEFINE_integer("runs", 8, "Runs in the grid (learning rates).")
_STEPS = flags.DEFINE_integer("steps", 100, "Train steps per run.")
_D = flags.DEFINE_integer("d_model", 64, "Model width.")
_LAYERS = flags.DEFINE_integer("layers", 2, "Encoder and decoder layers.")


def grid():
    config = default_config()
    config.model.update(d_model=_D.value, num_heads=4, d_ff=2 * _D.value, num_layers=_LAYERS.value)
    config.data.update(max_len=24, num_train=5000, num_valid=64)
    config.train.update(schedule="constant", warmup_steps=10, num_steps=_STEPS.value, batch_size=32,
                        log_every=10, eval_every=_STEPS.value, checkpoint_every=_STEPS.value,
                        bleu_examples=0)
    lrs = [1e-3 * (1 + i) for i in range(_RUNS.value)]
    config.sweep.axes = sweep_axes({"train.lr": lrs})
    return train.expand(config)


def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)
    runs = grid()
    total = len(runs) * _STEPS.value
    for vmap in (False, True):
        fns = train.compiled()
        before = fns.vtrain._cache_size() if vmap else fns.train._cache_size()
        with tempfile.TemporaryDirectory() as workdir:
            start = time.time()
            train.run_sweep(runs, workdir, vmap=vmap, progress=False)
            wall = time.time() - start
        after = fns.vtrain._cache_size() if vmap else fns.train._cache_size()
        print(f"{'vmapped' if vmap else 'sequential':>10}: {wall:7.1f} s for {len(runs)} runs, "
              f"{total / wall:7.1f} steps/s, {after - before} compiled train step(s)")


if __name__ == "__main__":
    app.run(main)
