"""Update probes against numpy on parameter trees and Adam states; the spike rule; a replay retraces its run."""

import types

import jax
import numpy as np
import optax
import pytest
from flax import nnx
from model_fixtures import tiny_model

import normjax
from normjax.probes import spike_replay, update_probes
from normjax.train import job, parse, steps
from normjax.train.loop import Probe, train_probed


@pytest.fixture(autouse=True)
def float64():
    """Overrides this folder's float64 fixture: the probes measure float32 training, as the trainer runs it."""
    yield


def _params(model):
    return jax.device_get(nnx.split(model, nnx.Param, ...)[1])


def _moved(params):
    """An elementwise change that moves every entry, zero-initialized biases too."""
    return jax.tree.map(lambda x: x + np.float32(0.01) * np.cos(7 * x + 1), params)


def _by_group(tree):
    """{group: float64 entries} of a loop-layer decoder's tree, from its flat paths (independent of the probe)."""
    out = {}
    for path, value in jax.tree_util.tree_leaves_with_path(tree):
        keys = [str(getattr(k, "key", getattr(k, "idx", k))) for k in path if str(k) != ".value"]
        keys = [k for k in keys if k != "value"]
        group = f"decoder/{keys[3]}" if keys[:3] == ["stacks", "decoder", "layers"] else "/".join(keys[:3])
        group = "decoder/final_norm" if group == "stacks/decoder/final_norm" else group
        out[group] = np.concatenate([out.get(group, np.zeros(0)), np.asarray(value, np.float64).ravel()])
    return out


def test_update_norms_equal_numpy_on_two_parameter_trees():
    model = tiny_model()
    before = _params(model)
    after = _moved(before)
    got = update_probes.update_stats(before, after, model)
    old, new = _by_group(before), _by_group(after)
    assert set(got["groups"]) == {"embedders/decoder/table", "decoder/final_norm", "decoder/0", "decoder/1"}
    for i, g in enumerate(got["groups"]):
        du, p = np.linalg.norm(new[g] - old[g]), np.linalg.norm(old[g])
        np.testing.assert_allclose([got["update_norm"][i], got["param_norm"][i]], [du, p], rtol=1e-12)
        np.testing.assert_allclose(got["ratio"][i], du / p, rtol=1e-12)
    everything = lambda t: np.concatenate([np.asarray(x, np.float64).ravel() for x in jax.tree.leaves(t)])
    du = np.linalg.norm(everything(after) - everything(before))
    np.testing.assert_allclose(got["total_update_norm"], du, rtol=1e-12)
    np.testing.assert_allclose(got["total_ratio"], du / np.linalg.norm(everything(before)), rtol=1e-12)
    # a scanned stack's layer axis is split: the loop's layers stacked give the same per-block numbers (the
    # model is only read for its config: a stand-in spares building a second model)
    scanned_model = types.SimpleNamespace(cfg=model.cfg.replace(scan_layers=True))
    scanned = update_probes.update_stats(_stacked(before), _stacked(after), scanned_model)
    assert scanned["groups"] == got["groups"]
    np.testing.assert_allclose(scanned["update_norm"], got["update_norm"], rtol=1e-12)


def _stacked(params):
    """The params a scanned decoder holds: the loop's layers stacked along a leading axis."""
    pure = nnx.to_pure_dict(params)
    layers = pure["stacks"]["decoder"]["layers"]
    pure["stacks"]["decoder"]["layers"] = jax.tree.map(lambda *xs: np.stack(xs), *[layers[i] for i in sorted(layers)])
    return nnx.State(pure)


def test_nu_statistics_equal_numpy_on_the_optax_state():
    model, b2, eps = tiny_model(), 0.95, 1e-3
    params = _params(model)
    adam = optax.scale_by_adam(b1=0.9, b2=b2, eps=eps)
    opt_state = adam.init(params)
    rng = np.random.default_rng(0)
    # gradient entries from 1e-6 to 1: some below eps, most above
    grads = [jax.tree.map(lambda x: rng.normal(size=x.shape) * 10 ** rng.uniform(-6, 0, x.shape), params)]
    grads.append(jax.tree.map(lambda g: rng.normal(size=g.shape) * np.abs(g), grads[0]))
    update = jax.jit(adam.update)  # one program, not one per leaf shape
    for g in grads:
        _, opt_state = update(jax.tree.map(np.float32, g), opt_state, params)
    got = update_probes.nu_stats(opt_state, model, eps=eps, b2=b2)
    # nu_2 = (1 - b2)(b2 g_1^2 + g_2^2), bias-corrected by 1 - b2^2: from the gradients, not from optax's state
    g1, g2 = _by_group(jax.tree.map(np.float32, grads[0])), _by_group(jax.tree.map(np.float32, grads[1]))
    for i, group in enumerate(got["groups"]):
        nu_hat = (1 - b2) * (b2 * g1[group] ** 2 + g2[group] ** 2) / (1 - b2**2)
        np.testing.assert_allclose([got["nu_mean"][i], got["nu_max"][i]], [nu_hat.mean(), nu_hat.max()], rtol=1e-5)
        # exact: no entry here lies within float32 rounding of eps^2 (one there could fall either side)
        assert got["nu_frac_below_eps2"][i] == np.mean(nu_hat < eps**2)
    assert got["nu_frac_below_eps2"].min() > 0 and got["nu_frac_below_eps2"].max() < 1
    assert update_probes.nu_stats(optax.trace(0.9).init(params), model, eps=eps, b2=b2) is None  # SGD: no nu


def _smooth(n=200, seed=0):
    """A falling loss with 1% step-to-step noise."""
    i = np.arange(n)
    return 2.0 + 3.0 * np.exp(-i / 60) + 0.01 * np.random.default_rng(seed).normal(size=n)


def test_the_spike_rule_fires_on_spikes_and_not_on_a_smooth_series():
    rule = spike_replay.SpikeRule()
    for seed in range(5):
        assert spike_replay.spikes(_smooth(seed=seed)) == []
    assert spike_replay.spikes(np.full(100, 3.0)) == []  # flat: MAD 0, the relative floor holds
    series = _smooth()
    series[120] += 0.5  # 50 x the noise
    series[150] = np.nan
    assert spike_replay.spikes(series) == [120, 150]
    early = _smooth()
    early[5] += 5.0  # before MIN_HISTORY values: no verdict
    assert spike_replay.spikes(early) == []
    # the threshold as documented: median 6; differences 2 -3 2 2 -3 1 3 -4 2, median 2, MAD 1
    history = [5.0, 7.0, 4.0, 6.0, 8.0, 5.0, 6.0, 9.0, 5.0, 7.0]
    level = 6.0 + 6 * 1.4826 * 1.0 / np.sqrt(2)
    assert rule.threshold(history) == pytest.approx(level, rel=1e-12)
    assert rule.fires(history, level + 1e-6) and not rule.fires(history, level - 1e-6)
    # the floor: a flat history's MAD is 0; 1e-3 of its median counts instead
    assert rule.threshold(np.full(20, 3.0)) == pytest.approx(3.0 + 6 * 3e-3, rel=1e-12)


def _tiny_run():
    """A 1+1 layer d=8 Pre-LN encoder-decoder on a small synthetic task: compiles and steps in seconds."""
    return parse(
        {
            "model": dict(arch="encoder_decoder", d_model=8, num_heads=2, d_ff=16, num_layers=1, placement="pre"),
            "data": dict(task="synthetic", max_len=12, num_train=256, num_valid=32),
            "train": dict(
                schedule="constant",
                num_steps=14,
                batch_size=4,
                warmup_steps=0,
                lr=3e-3,
                bleu_examples=0,
                optimizer="adamw",
                weight_decay=0.01,
            ),
        }
    )


def _start():
    """(the task's train batches, the model, its StepSpec, the initial train state) of _tiny_run()."""
    run = _tiny_run()
    task, cfg = job.prepare(run)
    model = normjax.Transformer(cfg, rngs=nnx.Rngs(run.train.seed))
    spec = job.step_spec(run, model, task.kind)
    return task.train.batch, model, spec, steps.init_state(spec, model, run.train.seed, job.hparams(run, cfg))


def test_a_replay_retraces_the_recorded_run():
    num_steps, k, spike_at = 14, 4, 11
    batch_at, model, spec, state = _start()
    nll = spike_replay.next_nll(spec)
    bump = lambda t: 100.0 if t in (spike_at, spike_at + 2) else 0.0  # spikes in the watched signal
    signal = lambda t, s, b: nll(t, s, b) + bump(t)
    monitor = spike_replay.SpikeReplay(spec, model, k, signal=signal)
    watched = update_probes.UpdateProbe(model, spec)
    _, metrics, (updates, _) = train_probed(spec, state, batch_at, num_steps, [Probe(1, watched), Probe(1, monitor)])
    # the second spike comes within k steps of the first: counted, not replayed
    assert monitor.spike_steps == [spike_at, spike_at + 2] and len(monitor.events) == 1
    event = monitor.events[0]
    s = event["start"]
    assert s == 4 and k <= spike_at - s < 2 * k  # the snapshot at the older of the two multiples of k
    # the same compiled step on the same state and batches: the recorded losses exactly
    np.testing.assert_array_equal(event["loss"], [m["loss"] for m in metrics[s:spike_at]])
    np.testing.assert_array_equal(event["steps"], np.arange(s + 1, spike_at + 1))
    replayed = event["probes"][0]
    assert [v["step"] for v in replayed] == list(range(s, spike_at + 1))
    for value in replayed[1:]:  # the replay's first value has no update before it
        recorded = updates[value["step"]][1]
        for key in ("update_norm", "ratio", "nu_mean", "nu_max", "nu_frac_below_eps2"):
            np.testing.assert_array_equal(value[key], recorded[key])
    # the default signal is the next update's nll (dropout 0): the two programs sum in other orders (float32)
    values = dict(monitor.values)
    watched_nll = [values[t] - bump(t) for t in range(num_steps)]
    np.testing.assert_allclose(watched_nll, [m["nll"] for m in metrics], rtol=1e-5)


def test_the_probed_update_is_the_one_the_engine_applied():
    """Per update: the probe's total ||theta_t - theta_{t-1}|| against the train step's own update_norm metric (of
    -lr (direction + decay) before it is added): they differ by the rounding of theta + u, at most 2^-24 ||theta_t||
    in float32 (plus 1e-6 relative for the metric's own float32 sum of squares)."""
    batch_at, model, spec, state = _start()
    _, metrics, (measured,) = train_probed(spec, state, batch_at, 5, [Probe(1, update_probes.UpdateProbe(model, spec))])
    assert [v["span"] for _, v in measured] == [0, 1, 1, 1, 1, 1] and np.isnan(measured[0][1]["total_update_norm"])
    for (t, value), m in zip(measured[1:], metrics, strict=True):
        rounding = 2.0**-24 * float(m["param_norm"])
        assert abs(value["total_update_norm"] - float(m["update_norm"])) <= rounding + 1e-6 * float(m["update_norm"]), t
