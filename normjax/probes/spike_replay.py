"""Loss-spike detection (a median + c MAD rule) and the replay of the updates before a spike with probes on each."""

import collections
import dataclasses
from collections.abc import Callable, Sequence

import jax
import numpy as np

from normjax.probes.update_probes import UpdateProbe
from normjax.train.job import compiled
from normjax.train.loop import Probe, train_probed

# The rule: value > median(H) + SPIKE_MADS * max(sigma, REL_FLOOR * |median(H)|), H the last SPIKE_WINDOW finite
# values before it, sigma = MAD_TO_SIGMA * MAD(diff(H)) / sqrt(2) the step-to-step noise. Medians and MADs, not
# means and stds: one earlier spike in the window moves them little. The MAD of the differences, not of H: a
# falling loss spreads H by its trend, but its successive differences only by the noise (a steady slope is their
# median). A falling series stays below median(H) (the window's middle); one rising steadily (an update norm
# during lr warmup) is flagged once half a window's rise exceeds SPIKE_MADS sigma: watch such a signal after it.
SPIKE_WINDOW = 50
# sigma units: MAD_TO_SIGMA * MAD is the standard deviation of Gaussian noise (and a difference of two
# independent values has sqrt(2) times the values' one); such noise exceeds 6 sigma about once in 10^9 steps.
SPIKE_MADS = 6.0
MAD_TO_SIGMA = 1.4826
# No verdict before this many values: the median and MAD of fewer say little about the noise.
MIN_HISTORY = 10
# The spread never counts as less than this fraction of |median| (a flat series has MAD 0: any rise would fire).
REL_FLOOR = 1e-3
# Replays a monitor keeps (each holds its probes' values for up to 2k updates); later spikes are counted only.
MAX_EVENTS = 10


@dataclasses.dataclass(frozen=True)
class SpikeRule:
    """A value spikes when it is not finite, or when at least `min_history` finite values precede it and it
    exceeds median(H) + mads * max(sigma, rel_floor * |median(H)|), H the last `window` finite values and
    sigma = MAD_TO_SIGMA * MAD(diff(H)) / sqrt(2) (see SPIKE_WINDOW)."""

    window: int = SPIKE_WINDOW
    mads: float = SPIKE_MADS
    min_history: int = MIN_HISTORY
    rel_floor: float = REL_FLOOR

    def threshold(self, history: Sequence[float]) -> float:
        """The level a value must exceed after `history` (its last `window` finite values); inf when too few."""
        h = np.asarray(history, np.float64)[-self.window :]
        h = h[np.isfinite(h)]
        if h.size < self.min_history:
            return np.inf
        med = np.median(h)
        d = np.diff(h)
        sigma = MAD_TO_SIGMA * np.median(np.abs(d - np.median(d))) / np.sqrt(2.0)
        spread = max(sigma, self.rel_floor * abs(med))
        return float(med + self.mads * spread)

    def fires(self, history: Sequence[float], value: float) -> bool:
        return not np.isfinite(value) or value > self.threshold(history)


def spikes(series: Sequence[float], rule: SpikeRule = SpikeRule()) -> list[int]:
    """The indices i where `rule` fires on series[i] after series[:i]."""
    return [i for i, v in enumerate(series) if rule.fires(series[max(0, i - rule.window) : i], v)]


def next_nll(spec) -> Callable:
    """A signal fn(step, state, batch): the per-token nll of `state` on `batch`, deterministic (no dropout, no
    label smoothing) by the shared compiled eval step. In train_probed `batch` is the next update's, so with
    dropout 0 the value at step t equals that update's "nll" metric (metrics[t]; at the end: the last batch's)."""

    def signal(step, state, batch) -> float:
        sums = compiled().eval(spec.graphdef, spec.task, state.params, state.consts, batch)
        return float(sums["nll"] / max(float(sums["tokens"]), 1.0))

    return signal


class SpikeReplay:
    """A loop.Probe fn for Probe(1, ...): watches a per-step signal and, when `rule` fires at step t, replays the
    updates s .. t-1 that led to the state at t from a saved state s, through train_probed with fresh probes on
    every step, and keeps what they measured (`events`).

    Memory is bounded: host copies of the state at the two latest multiples of k (so t - s is k .. 2k-1, or t
    before step k) and the batches since the older one (at most 2k). The replay runs the same compiled step on
    the same state and batches, so it retraces the run: its losses and parameters are the recorded ones. At most
    one replay per k steps (a spike lasting several steps is one event) and MAX_EVENTS in all.
    """

    def __init__(self, spec, model, k: int, *, rule: SpikeRule = SpikeRule(), signal=None, probes=None):
        """
        Args:
          spec, model: the run's StepSpec and normjax.Transformer.
          k: the least number of updates replayed before a spike (from step k on).
          signal: fn(step, state, batch) -> float watched by `rule` (default next_nll(spec); the update norm:
            `lambda s, state, b: probe(s, state, b)["total_update_norm"]` with an UpdateProbe `probe`).
          probes: () -> list of fn(step, state, batch), fresh for each replay (default [UpdateProbe(model, spec)]).
        """
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        self.spec, self.k, self.rule = spec, k, rule
        self.signal = signal or next_nll(spec)
        self.probes = probes or (lambda: [UpdateProbe(model, spec)])
        self.values: list[tuple[int, float]] = []  # (step, signal) of every call
        self.events: list[dict] = []
        self.spike_steps: list[int] = []  # every step it fired at, replayed or not
        self._snapshots = collections.deque(maxlen=2)  # (step, host state)
        self._batches: dict[int, dict] = {}
        self._quiet_until = 0

    def __call__(self, step: int, state, batch) -> dict:
        """Records the state (at multiples of k) and the next update's batch; replays on a spike.

        Returns:
          {"signal": the value at this step, "spike": whether the rule fired}.
        """
        del step  # the state's own step counts
        t = int(state.step)
        if t % self.k == 0:
            self._snapshots.append((t, jax.device_get(state)))
            self._batches = {s: b for s, b in self._batches.items() if s >= self._snapshots[0][0]}
        self._batches[t] = jax.device_get(batch)
        value = float(self.signal(t, state, batch))
        spike = self.rule.fires([v for _, v in self.values[-self.rule.window :]], value)
        self.values.append((t, value))
        if spike:
            self.spike_steps.append(t)
            if t >= self._quiet_until and len(self.events) < MAX_EVENTS:
                self.events.append(self.replay(t) | {"signal": value})
                self._quiet_until = t + self.k
        return {"signal": value, "spike": spike}

    def replay(self, t: int) -> dict:
        """Replays the updates from the newest snapshot at least k steps before `t` (else the oldest) up to `t`,
        the latest step this monitor saw (also callable by hand, e.g. after training).

        Returns:
          {"spike_step": t, "start": s, "steps": (n,) the state's step after each update (s+1 .. t), "loss": (n,)
          the replayed losses, "metrics": the replay's per-update metrics, "probes": per probe, its values on the
          states s, s+1, ..., t (n + 1 each)}.
        """
        s, saved = next(((s, st) for s, st in reversed(self._snapshots) if t - s >= self.k), self._snapshots[0])
        fns = self.probes()
        probes = [Probe(1, lambda done, state, batch, fn=fn: fn(s + done, state, batch)) for fn in fns]
        metrics, measured = [], [[] for _ in fns]
        if t > s:  # (a non-finite signal at step 0 has nothing before it)
            _, metrics, measured = train_probed(
                self.spec, jax.device_put(saved), lambda i: self._batches[s + i], t - s, probes
            )
        return {
            "spike_step": t,
            "start": s,
            "steps": np.arange(s + 1, s + 1 + len(metrics)),
            "loss": np.array([float(m["loss"]) for m in metrics]),
            "metrics": metrics,
            "probes": [[value for _, value in out] for out in measured],
        }
