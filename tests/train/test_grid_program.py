"""A grid is one program: one compile per structure, lockstep runs equal solo runs, a diverging run is frozen."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import normjax
from normjax.train import records, steps
from normjax.train.compile_cache import count_compiles
from normjax.train.config_io import parse
from normjax.train.job import hparams, prepare, step_spec
from normjax.train.sweep import expand, run_sweep

SHORT = dict(train__num_steps=10, train__log_every=5, train__eval_every=10, train__bleu_examples=0,
             train__checkpoint_every=10)  # fmt: skip


def _runs(tiny, axes, **overrides):
    config = tiny(**(SHORT | overrides))
    config["sweep"] = {"axes": axes}
    return expand(config)


def _logs(folder, runs):
    return {r.name: records.read_jsonl(os.path.join(folder, r.name, "metrics.jsonl")) for r in runs}


def _four_runs(tiny, lrs, seed):
    """Four runs of one structure that differ in lr, warmup and seed."""
    runs = _runs(tiny, {"train.lr": list(lrs), "train.warmup_steps": [0, 5]}, model__d_ff=28)
    return runs[:3] + _runs(tiny, {"train.seed": [seed]}, model__d_ff=28, train__lr=lrs[0] / 2)


def test_a_grid_compiles_each_program_once_per_structure(tmp_path, tiny):
    # a shape no other test uses (d_ff 28): the programs below are compiled here
    with count_compiles() as first:
        run_sweep(_four_runs(tiny, (1e-3, 3e-3), 7), str(tmp_path / "first"), vmap=True, progress=False)
    trainer = ("jit(vmapped_train_step)", "jit(eval_step)", "jit(_stack)", "jit(_take)")
    assert [first[name] for name in trainer] == [1, 1, 1, 1]
    # another grid of the same structure (other lrs, warmups, seeds): not one program is built again
    with count_compiles() as second:
        run_sweep(_four_runs(tiny, (2e-3, 5e-3), 8), str(tmp_path / "second"), vmap=True, progress=False)
    assert sum(second.values()) == 0, second


def test_two_structures_in_one_grid_compile_two_train_steps(tmp_path, tiny):
    runs = _runs(tiny, {"model.placement": ["post", "pre"], "train.lr": [1e-3, 3e-3]}, model__d_ff=44)
    with count_compiles() as compiles:
        run_sweep(runs, str(tmp_path), vmap=True, progress=False)
    assert compiles["jit(vmapped_train_step)"] == 2


@pytest.mark.parametrize("lrs", [(1e-3, 3e-3, 1e-2), (3e-3, 1e4, 1e-3)], ids=["healthy", "one_diverges"])
def test_a_vmapped_group_equals_its_runs_trained_one_at_a_time(tmp_path, tiny, lrs):
    axes = {"train.lr": list(lrs), "train.warmup_steps": [0, 3]}
    runs = _runs(tiny, axes, train__divergence_check_every=1, train__divergence_patience=2)
    solo = run_sweep(runs, str(tmp_path / "solo"), vmap=False, progress=False)
    group = run_sweep(runs, str(tmp_path / "group"), vmap=True, progress=False)
    solo_logs, group_logs = _logs(tmp_path / "solo", runs), _logs(tmp_path / "group", runs)
    for s, g in zip(solo["runs"], group["runs"], strict=True):
        assert g["summary"]["outcome"] == s["summary"]["outcome"]
        assert g["summary"]["diverged_step"] == s["summary"]["diverged_step"]
        assert [r["step"] for r in group_logs[g["name"]]] == [r["step"] for r in solo_logs[s["name"]]]
        diverged = s["summary"]["diverged_step"]
        # a diverging run's exploding values are chaotic (its loss is ~1e9 steps before the patience rule calls
        # it): compared at init (step 0) only; the healthy runs over their whole logs
        pairs = zip(solo_logs[s["name"]], group_logs[g["name"]], strict=True)
        for rs, rg in [(a, b) for a, b in pairs if diverged is None or a["step"] == 0]:
            keys = sorted(k for k in rs if k != "step" and rs[k] is not None and np.isfinite(rs[k]))
            exact = [k for k in keys if k != "train/update_norm"]
            # float32: the vmapped matmuls add in another order, so values differ by a few roundings (eps 1.2e-7
            # per op, measured up to 4e-7 relative): rtol 2e-6. The update norm is looser: Adam maps a gradient
            # entry at the rounding floor to an update of about lr whatever its size (m / sqrt(v) = g / |g| at
            # the first step), so one entry's rounding moves the norm by ~1 / (2 * entries) ~ 1e-4 relative.
            np.testing.assert_allclose([rg[k] for k in exact], [rs[k] for k in exact], rtol=2e-6, atol=0)
            if "train/update_norm" in keys:
                assert rg["train/update_norm"] == pytest.approx(rs["train/update_norm"], rel=1e-4)
    if 1e4 in lrs:
        diverged = [r for r in group["runs"] if r["summary"]["outcome"] == "diverged"]
        assert {r["overrides"]["train.lr"] for r in diverged} == {1e4}
        assert all(1 <= r["summary"]["diverged_step"] < 10 for r in diverged)
        assert sum(r["summary"]["outcome"] != "diverged" for r in group["runs"]) == 4


def _state_and_batches(run, num_steps):
    task, cfg = prepare(run)
    model = normjax.Transformer(cfg, rngs=nnx.Rngs(run.train.seed))
    spec = step_spec(run, model, task.kind)
    return (
        spec,
        steps.init_state(spec, model, run.train.seed, hparams(run, cfg)),
        [task.train.batch(t) for t in range(num_steps)],
    )


def test_a_diverged_run_in_a_group_is_frozen_at_its_divergence_and_cannot_touch_the_others(tiny):
    healthy, absurd = (
        parse(tiny(train__lr=lr, train__warmup_steps=0, train__divergence_patience=1)) for lr in (3e-3, 1e4)
    )
    spec, state_h, batches = _state_and_batches(healthy, 8)
    _, state_a, _ = _state_and_batches(absurd, 8)
    stack = lambda *xs: jax.tree.map(lambda *v: jnp.stack(v), *xs)
    group, solo, frozen_at, params_at = stack(state_h, state_a), state_h, None, None
    vstep, step = jax.jit(steps.vmapped_train_step, static_argnums=0), jax.jit(steps.train_step, static_argnums=0)
    for t, batch in enumerate(batches):
        group, group_metrics = vstep(spec, group, stack(batch, batch))
        solo, solo_metrics = step(spec, solo, batch)
        # the healthy run equals its solo run (float32, another summation order: a few roundings, see above);
        # its parameters are not compared entry by entry: Adam turns a gradient entry at the rounding floor
        # into an update of about lr of either sign, in the solo run as much as in the group
        for k in ("loss", "nll", "grad_norm", "param_norm"):
            assert float(group_metrics[k][0]) == pytest.approx(float(solo_metrics[k]), rel=2e-6), (t, k)
        at = int(group.diverged_at[1])
        if at >= 0 and frozen_at is None:
            frozen_at, params_at = t + 1, jax.tree.map(lambda x: np.asarray(x[1]), group.params)
    assert int(group.diverged_at[0]) == -1 and frozen_at is not None and int(group.diverged_at[1]) == frozen_at
    assert frozen_at < len(batches)  # updates ran after it diverged: its parameters did not move
    for now, then in zip(jax.tree.leaves(group.params), jax.tree.leaves(params_at), strict=True):
        np.testing.assert_array_equal(np.asarray(now[1]), then)


def test_the_probed_trainer_probes_at_its_steps_and_leaves_the_training_alone(tiny):
    from normjax.train.loop import Probe, run_steps, train_probed

    run = parse(tiny(train__warmup_steps=0))
    spec, state, batches = _state_and_batches(run, 7)
    seen = []
    probe = Probe(3, lambda step, s, batch: seen.append((step, int(s.step))) or {"step": int(s.step)}, frozenset({1}))
    probed, metrics, (measured,) = train_probed(spec, state, batches.__getitem__, 7, [probe])
    assert [t for t, _ in measured] == [0, 1, 3, 6, 7] and len(metrics) == 7
    assert seen == [(t, t) for t in (0, 1, 3, 6, 7)]  # the step it is given is the state's own
    step = jax.jit(steps.train_step, static_argnums=0)
    plain, _ = run_steps(state, lambda s, t: step(spec, s, batches[t]), 0, 7)
    for a, b in zip(jax.tree.leaves(probed.params), jax.tree.leaves(plain.params), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))  # the same program on the same inputs


def test_a_probe_every_that_is_not_a_positive_int_is_refused():
    from normjax.train.loop import Probe

    for every in (0, -3, 1.5, True, "2"):
        with pytest.raises(ValueError, match="Probe.every must be a positive int"):
            Probe(every, lambda step, s, batch: None)
