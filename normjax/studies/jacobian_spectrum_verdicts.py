"""Verdict rules of jacobian_spectrum: ReZero identity (R1, S7), log-sv spread (R2), Pre-LN highway (S3)."""

from __future__ import annotations

import numpy as np

from normjax.report import verdict_row

ISO_TOL = 1e-12  # float64: an exact identity leaves only rounding
UNDAMPED = 0.5  # sigma_min(dx_L/dx_l) >= this: no gradient direction shrinks by more than 2x


def _missing(claim, prediction, needs):
    return verdict_row(
        claim,
        prediction,
        f"not run: the config lacks {needs}",
        "not testable at this scale",
        f"the study needs {needs} to test {claim}",
    )


def _io(results, placement, key):
    return [results["runs"][placement][str(L)]["io"][key]["mean"] for L in results["depths"]]


def rezero_identity(results: dict) -> list[dict]:
    r1_pred = "ReZero's input-output Jacobian is exactly I at init; only alpha gets a gradient at step 0"
    s7_pred = "ReZero makes the network the identity at init"
    if "rezero" not in results["runs"]:
        return [_missing("R1", r1_pred, "placement rezero"), _missing("S7", s7_pred, "placement rezero")]
    depths, runs = results["depths"], results["runs"]["rezero"]
    sv_dev = max(runs[str(L)]["max_dev_from_1"] for L in depths)
    j_dev = max(runs[str(L)].get("max_abs_J_minus_I", np.nan) for L in depths)
    x_dev = max(runs[str(L)].get("max_abs_xL_minus_x0", np.nan) for L in depths)
    grads = results["rezero_gradients"]
    jac_ok = sv_dev <= ISO_TOL
    grad_ok = grads["other_grad_max"] == 0 and grads["gate_grad_min"] > 0
    verdict = {(True, True): "holds", (False, False): "does not hold"}.get((jac_ok, grad_ok), "partly holds")
    measured = (
        f"L = {depths}: max |sigma_i - 1| = {sv_dev:.1e} over all {results['n']} singular values of "
        f"d x_L / d x_0; at step 0 the {grads['num_other']} non-alpha block weights have max gradient "
        f"norm {grads['other_grad_max']:.1e}, alpha {grads['gate_grad_min']:.3g} (L = {min(depths)})"
    )
    r1 = verdict_row(
        "R1",
        r1_pred,
        measured,
        verdict,
        f"rule: max |sigma - 1| <= {ISO_TOL:g} at every L, and the gradient is exactly 0 for every "
        "block weight but alpha and non-zero for alpha (embeddings excluded: the identity path "
        "reaches them)",
        "io_spectra.png",
        max_sv_dev=sv_dev,
        **grads,
    )
    iso_ok = jac_ok and j_dev <= ISO_TOL and x_dev <= ISO_TOL
    s7 = verdict_row(
        "S7",
        s7_pred + " (ReZero half only)",
        f"ReZero half only (the DeepNorm half of S7 is checked by another study): L = {depths}: max |x_L - x_0| = "
        f"{x_dev:.1e}, max |J - I| = {j_dev:.1e}, max |sigma - 1| = {sv_dev:.1e}",
        "holds" if iso_ok else "does not hold",
        f"rule: x_L = x_0 and d x_L / d x_0 = I to {ISO_TOL:g} at every L (perfect dynamical isometry); "
        "the verdict covers the ReZero half only",
        "io_spectra.png",
        max_abs_J_minus_I=j_dev,
        max_abs_xL_minus_x0=x_dev,
    )
    return [r1, s7]


def spread(results: dict) -> dict:
    prediction = "the std of log singular values of d x_L / d x_0 widens with depth for Post-LN; ReZero's is 0"
    if not {"post", "rezero"} <= set(results["runs"]):
        return _missing("R2", prediction, "placements post and rezero")
    depths = results["depths"]
    post, rezero = np.array(_io(results, "post", "log_std")), np.array(_io(results, "rezero", "log_std"))
    unresolved = _io(results, "post", "below_floor")
    widens = bool(np.all(np.diff(post) > 0)) and len(depths) > 1
    flat = bool(np.all(rezero <= ISO_TOL))
    verdict = {(True, True): "holds", (False, False): "does not hold"}.get((widens, flat), "partly holds")
    others = "; ".join(
        f"{p} {', '.join(f'{v:.2f}' for v in _io(results, p, 'log_std'))}"
        for p in results["runs"]
        if p not in ("post", "rezero")
    )
    measured = (
        f"std of ln sigma at L = {depths}: Post-LN {', '.join(f'{v:.2f}' for v in post)}; ReZero "
        f"{', '.join(f'{v:.1e}' for v in rezero)}; {others}"
    )
    floor, structural = results["resolution"], 2 * results["seq_len"]
    if any(u > structural for u in unresolved):
        measured += (
            f" (Post-LN: {', '.join(f'{u:.0f}' for u in unresolved)} singular values below {floor:g} x "
            f"the largest left out, beyond the {structural} structural zeros: its spread is a lower bound)"
        )
    reason = (
        f"rule: Post-LN's std strictly increases with L and ReZero's is <= {ISO_TOL:g}; singular values "
        f"below {floor:g} x the largest are excluded (LN's 2T structural zeros: every token's mean and, up to "
        "eps, radial direction; and values beyond float64's resolution of the product)"
    )
    return verdict_row(
        "R2", prediction, measured, verdict, reason, "log_sv_spread.png", post_log_std=post, rezero_log_std=rezero
    )


def highway(results: dict) -> dict:
    prediction = "Pre-LN: d x_L / d x_l = I + sum dF/dx, so gradients reach layer 1 undamped"
    if "pre" not in results["runs"]:
        return _missing("S3", prediction, "placement pre")
    rows = {}
    for placement in ("pre", "post"):
        if placement in results["runs"]:
            rows[placement] = [
                (
                    L,
                    np.nanmin(np.array(a["e2e"]["min"]["mean"], np.float64)),
                    float(np.min(a["e2e"]["rms"]["mean"])),
                    a["e2e"]["max"]["mean"][0],
                )
                for L, a in ((L, results["runs"][placement][str(L)]) for L in results["depths"])
            ]
    pre = rows["pre"]
    worst_min = min(r[1] for r in pre)
    worst_rms = min(r[2] for r in pre)
    if np.isnan(worst_min):
        verdict = "partly holds" if worst_rms >= 1 else "does not hold"
    else:
        verdict = "holds" if worst_min >= UNDAMPED else "partly holds" if worst_rms >= 1 else "does not hold"

    measured = "Pre-LN " + "; ".join(
        f"L={L}: min_l sigma_min {m:.3g}, min_l rms gain {r:.3g}, ||dx_L/dx_0|| {top:.3g}" for L, m, r, top in pre
    )
    if "post" in rows:  # Post-LN's sigma_min is LN's structural zero; its typical gain is the contrast
        measured += " | Post-LN " + "; ".join(
            f"L={L}: min_l rms gain {r:.3g}, ||dx_L/dx_0|| {top:.3g}" for L, _, r, top in rows["post"]
        )
    reason = (
        f"rule: holds if sigma_min(d x_L / d x_l) >= {UNDAMPED} for every l and L (no gradient direction "
        "shrinks by more than 2x); partly holds if only the typical gain (rms singular value) stays >= 1; "
        "else does not hold. x_L is the stream before the final norm"
    )
    return verdict_row(
        "S3",
        prediction,
        measured,
        verdict,
        reason,
        "layer_profiles.png",
        pre_min_sigma_min=worst_min,
        pre_min_rms_gain=worst_rms,
    )


def verdicts(results: dict) -> list[dict]:
    return rezero_identity(results) + [spread(results), highway(results)]
