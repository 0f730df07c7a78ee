"""Per-layer update norms ||dtheta||, ||dtheta|| / ||theta|| and Adam second-moment statistics, as a training probe."""

import jax
import numpy as np
from flax import nnx

import normjax
from normjax.train import gi_adam


def _arrays(values) -> list[np.ndarray]:
    """The array leaves of `values` in float64; optax's MaskedNode (Muon's matrices in Adam's state) left out."""
    return [np.asarray(v, np.float64) for v in values if hasattr(v, "shape")]


def layer_groups(tree, model) -> dict[str, list[np.ndarray]]:
    """{group: [float64 arrays]} of a tree shaped like `model`'s params (the params, their change, Adam's nu).

    One group per block, "<stack>/<l>" (normjax.layer_params: a scanned stack's layer axis is split), and one
    per module outside the blocks, named by its path with "stacks/" dropped ("embedders/decoder/table",
    "decoder/final_norm", "head", ...), in the tree's order. Leaves that are not arrays are left out.
    """
    out: dict[str, list[np.ndarray]] = {}
    for path, leaf in nnx.to_flat_state(tree):
        value = leaf.get_value() if isinstance(leaf, nnx.Variable) else leaf
        keys = [str(k) for k in path]
        if keys[0] == "stacks" and keys[2] == "layers":
            stack = keys[1]
            if f"{stack}/0" not in out:
                for l, layer in enumerate(normjax.layer_params(tree, model, stack)):
                    out[f"{stack}/{l}"] = _arrays(layer.values())
            continue
        name = "/".join(keys[1:-1] if keys[0] == "stacks" else keys[:-1]) or keys[-1]
        out.setdefault(name, []).extend(_arrays([value]))
    return out


def _sq(arrays: list[np.ndarray]) -> float:
    return float(sum(np.sum(np.square(a)) for a in arrays))


def update_stats(prev_params, params, model) -> dict:
    """Per-layer change between two parameter trees shaped like `model`'s params (numpy, float64, on the host).

    Returns:
      {"groups": names (G,) as in layer_groups, "update_norm": (G,) ||params - prev_params||_F over the group,
      "param_norm": (G,) ||prev_params||, "ratio": (G,) update_norm / param_norm (inf or NaN for a group that was
      all zeros, e.g. ReZero's alpha at init), "total_update_norm", "total_param_norm", "total_ratio": over all}.
    """
    prev, now = layer_groups(prev_params, model), layer_groups(params, model)
    groups = tuple(prev)
    du2 = np.array([_sq([b - a for a, b in zip(prev[g], now[g], strict=True)]) for g in groups])
    p2 = np.array([_sq(prev[g]) for g in groups])
    with np.errstate(divide="ignore", invalid="ignore"):
        return {
            "groups": groups,
            "update_norm": np.sqrt(du2),
            "param_norm": np.sqrt(p2),
            "ratio": np.sqrt(du2 / p2),
            "total_update_norm": float(np.sqrt(du2.sum())),
            "total_param_norm": float(np.sqrt(p2.sum())),
            "total_ratio": float(np.sqrt(du2.sum() / p2.sum())),
        }


def adam_moments(opt_state):
    """(count, mu, nu) of the first Adam-like state (fields count, mu and nu) in `opt_state`, searched depth first
    through tuples (optax chains, Masked/Partition states) and dicts; None when there is none (SGD)."""
    if hasattr(opt_state, "nu") and hasattr(opt_state, "count") and hasattr(opt_state, "mu"):
        return opt_state.count, opt_state.mu, opt_state.nu
    children = opt_state.values() if isinstance(opt_state, dict) else opt_state if isinstance(opt_state, tuple) else ()
    for child in children:
        found = adam_moments(child)
        if found is not None:
            return found
    return None


def nu_stats(opt_state, model, *, eps: float, b2: float, bias_corrected: bool = True) -> dict | None:
    """Per-layer statistics of Adam's second moment: nu_hat = nu / (1 - b2^count) (nu itself when not
    `bias_corrected`, as GI-Adam's; and at count 0), the running mean of g^2 that divides Adam's step.

    "nu_mean" and "nu_max" are the mean and largest nu_hat entry of the group (sqrt(nu_mean) is the group's
    gradient RMS); "nu_frac_below_eps2" the fraction of its entries with nu_hat < eps^2, i.e. sqrt(nu_hat) < eps:
    there eps, not the gradient scale, sets Adam's denominator sqrt(nu_hat) + eps, so the entry's update is
    shrunk more than 2x from Adam's ~lr sign-like step (Wortsman et al. 2023, arXiv 2309.14322: a gradient RMS
    falling toward eps shrinks the updates), and a gradient that returns to such an entry gets a large step
    before nu catches up (Molybog et al. 2023, arXiv 2304.09871, relate Adam's loss spikes to layers whose
    gradients shrank toward eps). At the repository's default eps, 1e-9, that takes a gradient RMS below 1e-9:
    entries that got (almost) no gradient lately, such as embedding rows of unseen tokens.

    Returns:
      {"groups", "nu_mean", "nu_max", "nu_frac_below_eps2": (G,) each, groups as in layer_groups, over the
      entries Adam updates (under Muon: not the blocks' matrices; NaN for a group without any)}, or None when
      `opt_state` holds no Adam state.
    """
    found = adam_moments(opt_state)
    if found is None:
        return None
    count, _, nu = jax.device_get(found)
    correction = 1.0 - b2 ** int(count) if bias_corrected and int(count) > 0 else 1.0
    groups = layer_groups(nu, model)
    stats = {"nu_mean": [], "nu_max": [], "nu_frac_below_eps2": []}
    for arrays in groups.values():
        flat = np.concatenate([a.ravel() for a in arrays]) / correction if arrays else np.full(1, np.nan)
        stats["nu_mean"].append(flat.mean())
        stats["nu_max"].append(flat.max())
        stats["nu_frac_below_eps2"].append(np.mean(flat < eps**2) if arrays else np.nan)
    return {"groups": tuple(groups)} | {k: np.array(v) for k, v in stats.items()}


class UpdateProbe:
    """A loop.Probe fn: per-layer update statistics of a single run's train state, and Adam's nu statistics.

    The update is measured, not reconstructed: the change theta_t - theta_s between the parameters of this call
    (t = state.step) and those of the previous call (s, a host copy kept here: one copy of the params). With
    Probe(1, ...) it is each update as applied: -lr (Adam direction + weight decay), after the placement's
    post-update hook (nGPT's renormalization), zero once a divergence froze the run. With a larger `every` it
    spans several updates ("span" says how many). nu statistics are of the optimizer state after update t.
    """

    def __init__(self, model, spec):
        """`model`: the normjax.Transformer trained (its structure names the groups); `spec`: its StepSpec."""
        self.model, self.optimizer = model, spec.optimizer
        self._prev = None  # (step, host params) of the previous call

    def __call__(self, step: int, state, batch) -> dict:
        """{"step": state.step, "span": updates since the previous call (0 at the first), update_stats' entries
        (NaN at the first call), and nu_stats' entries when the optimizer has an Adam state}."""
        del step, batch  # the state's own step counts (a replay starts at its snapshot's)
        now, params = int(state.step), jax.device_get(state.params)
        first = self._prev is None
        out = update_stats(params if first else self._prev[1], params, self.model)
        if first:  # nothing to compare with yet
            out = {k: v if k == "groups" else np.full(np.shape(v), np.nan) for k, v in out.items()}
        out["span"] = 0 if first else now - self._prev[0]
        self._prev = (now, params)
        opt = self.optimizer
        nu = nu_stats(state.opt_state, self.model, eps=opt.eps, b2=opt.b2, bias_corrected=opt.name != gi_adam.GI_ADAM)
        if nu is not None:  # aligned with the parameter groups (a group without Adam entries: NaN)
            at = {g: i for i, g in enumerate(nu.pop("groups"))}
            out |= {k: np.array([v[at[g]] if g in at else np.nan for g in out["groups"]]) for k, v in nu.items()}
        return {"step": now} | out
