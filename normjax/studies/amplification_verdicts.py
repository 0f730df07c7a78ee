"""Verdict rules of amplification: O(N) vs O(log N) output change (L1), Admin's closed-form omega (L2)."""

from __future__ import annotations

import numpy as np

from normjax.report import verdict_row

PREDICTED = {"post": "linear", "pre": "log", "admin": "log", "admin_profiled": "log"}
OMEGA_FACTOR = 1.5  # the closed form "matches" profiling when within this factor of it


def _grade(hits: int, total: int) -> str:
    return "holds" if hits == total else "does not hold" if hits == 0 else "partly holds"


def _better(results: dict, scope: str, kind: str, placement: str) -> dict:
    return results["runs"][placement][scope][kind]["fit"]


def amplification(results: dict) -> dict:
    prediction = (
        "Var of the output change after an update of the sublayer weights grows O(N) with residual "
        "sublayers N for Post-LN, O(log N) for Pre-LN and Admin"
    )
    checked = [p for p in PREDICTED if p in results["runs"]]
    if "post" not in checked or len(checked) < 2:
        return verdict_row(
            "L1",
            prediction,
            "not run: the config lacks post and pre/admin",
            "not testable at this scale",
            "needs placement post and one of pre, admin",
        )
    scope, others = results["scopes"][0], results["scopes"][1:]
    N = results["runs"]["post"]["N"]
    hits, parts, numbers = 0, [], {}
    for kind in results["kinds"]:
        cells = []
        for placement in checked:
            fit = _better(results, scope, kind, placement)
            hits += fit["better"] == PREDICTED[placement]
            cells.append(
                f"{placement} {fit['better']} (r^2 lin {fit['linear']['r2']:.3f} / log "
                f"{fit['log']['r2']:.3f}, power {fit['power']['exponent']:.2f})"
            )
            numbers[f"{placement}_{kind}_better"] = fit["better"]
        post = results["runs"]["post"][scope][kind]["var_mean"]
        cells.append(f"Post-LN Var {post[0]:.2e} -> {post[-1]:.2e} from N = {N[0]:.0f} to {N[-1]:.0f}")
        parts.append(f"{kind} update of the {scope} weights: " + ", ".join(cells))
        for other in others:
            parts.append(
                f"{kind} update of {other} weights (not in the rule): "
                + ", ".join(
                    f"{p} {_better(results, other, kind, p)['better']} (power "
                    f"{_better(results, other, kind, p)['power']['exponent']:.2f})"
                    for p in checked
                )
            )
    total = len(checked) * len(results["kinds"])
    reason = (
        f"rule: per placement and update kind, the law with the higher r^2 of Var = a + bN vs a + b ln N "
        f"over N = {', '.join(f'{n:.0f}' for n in N)} is compared with the prediction (linear for post, log "
        f"for pre and admin); holds if it matches in all {total} cases, does not hold if in none. Updates "
        f"move the {scope} weights (Liu et al.'s sublayer parameters W_i)"
    )
    return verdict_row(
        "L1",
        prediction,
        f"prediction matched in {hits}/{total}: " + "; ".join(parts),
        _grade(hits, total),
        reason,
        "amplification.png",
        matched=hits,
        total=total,
        **numbers,
    )


def omega(results: dict) -> dict:
    prediction = "Admin's profiled omega (last sublayer) is approximated by the closed form sqrt((N+1)/ln(N+1) - 1)"
    agg = results["runs"].get("admin_profiled")
    if agg is None:
        return verdict_row(
            "L2",
            prediction,
            "not run: the config lacks admin_profiled",
            "not testable at this scale",
            "needs placement admin_profiled",
        )
    N = np.array(agg["N"])
    profiled, closed = np.array(agg["omega_last"]["mean"]), np.array(agg["omega_closed_form"])
    ratio = profiled / closed
    close = np.abs(np.log(ratio)) <= np.log(OMEGA_FACTOR)
    measured = "; ".join(
        f"N={n:.0f}: profiled {p:.2f} vs closed {c:.2f} (x{r:.2f})"
        for n, p, c, r in zip(N, profiled, closed, ratio, strict=True)
    )
    reason = (
        f"rule: the closed form is within a factor {OMEGA_FACTOR} of the profiled last-sublayer omega "
        f"at every N (holds), at some (partly holds) or at none (does not hold); profiling includes "
        "Var[x_0] of the embedding + positions"
    )
    return verdict_row(
        "L2", prediction, measured, _grade(int(close.sum()), close.size), reason, "admin_omega.png", ratio=ratio, N=N
    )


def verdicts(results: dict) -> list[dict]:
    return [amplification(results), omega(results)]
