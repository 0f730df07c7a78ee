"""Verdict rules of grad_norms_at_init: per-layer FFN gradient profiles (X6, L3, R5, S1, S3)."""

from __future__ import annotations

from normjax.report import verdict_row

KERNEL = "ffn/fc2/kernel"  # W^2 of Xiong et al.'s FFN; fc1 is reported beside it
METRIC = "norm_of_mean"  # Xiong et al.'s ||E[grad]||; the mean of per-batch norms is reported too
GROW = 0.05  # |d ln||grad|| / d layer| above 5% per layer (and 2 stderr) is a trend, below it flat
FIGURE = "grad_fc2.png"
ORDER = ("does not hold", "partly holds", "holds")


def grows(fit: dict) -> bool:
    """The gradient norm rises with the layer index: slope > max(GROW, 2 stderr)."""
    return fit["slope"] > max(GROW, 2 * fit["stderr"])


def flat(fit: dict) -> bool:
    return abs(fit["slope"]) <= GROW + 2 * fit["stderr"]


def _fit(results, arch, placement, stack, name=KERNEL, metric=METRIC) -> dict | None:
    agg = results["runs"].get(arch, {}).get(placement)
    return None if agg is None or stack not in agg else agg[stack][name][metric]["fit"]


def _stacks(results, placement) -> list[tuple[str, str]]:
    return [(a, s) for a, by_p in results["runs"].items() if placement in by_p for s in by_p[placement]]


def _describe(fit: dict) -> str:
    return (
        f"slope {fit['slope']:+.3f} +- {fit['stderr']:.3f}/layer (r^2 {fit['r2']:.2f}), "
        f"max/min {fit['max_over_min']:.2f}"
    )


def _count_verdict(flags: list[bool]) -> str:
    return "holds" if all(flags) else "partly holds" if any(flags) else "does not hold"


def _missing(claim, prediction, what):
    return verdict_row(claim, prediction, f"{what} not run", "not testable at this scale", f"the config has no {what}")


def fig3_profile(results: dict) -> dict:
    prediction = "6-6 Transformer at init: Post-LN FFN gradient grows with layer index, Pre-LN flat"
    checks, parts = [], []
    for stack in ("encoder", "decoder"):
        post, pre = (_fit(results, "encoder_decoder", p, stack) for p in ("post", "pre"))
        if post is None or pre is None:
            return _missing("X6", prediction, "encoder_decoder post and pre")
        checks += [grows(post), flat(pre)]
        other = {p: _fit(results, "encoder_decoder", p, stack, metric="mean_of_norms") for p in ("post", "pre")}
        parts.append(
            f"{stack}: post {_describe(post)}, pre {_describe(pre)} (mean of per-batch "
            f"norms: post {other['post']['slope']:+.3f}, "
            f"pre {other['pre']['slope']:+.3f})"
        )
    n = results["num_batches"]
    measured = f"||E[grad]|| of {KERNEL} over {n} batches; " + "; ".join(parts)
    reason = (
        f"rule: 'grows' = slope of ln||grad|| per layer > max({GROW}, 2 stderr), 'flat' = "
        f"|slope| <= {GROW} + 2 stderr; four checks (post grows, pre flat, in the encoder "
        "and the decoder): all -> holds, none -> does not hold, else partly holds"
    )
    return verdict_row("X6", prediction, measured, _count_verdict(checks), reason, FIGURE, checks=checks)


def decoder_not_encoder(results: dict) -> dict:
    prediction = "At init, Post-LN's gradient vanishing (toward shallow layers) is in the decoder"
    dec, enc = (_fit(results, "encoder_decoder", "post", s) for s in ("decoder", "encoder"))
    if dec is None:
        return _missing("L3", prediction, "encoder_decoder post")
    alone = _fit(results, "encoder", "post", "encoder")
    verdict = "does not hold" if not grows(dec) else "partly holds" if grows(enc) else "holds"
    measured = f"Post-LN {KERNEL} ||E[grad]||: decoder {_describe(dec)}; encoder {_describe(enc)}" + (
        "" if alone is None else f"; encoder-only model {_describe(alone)}"
    )
    reason = (
        f"rule: the decoder's gradient grows with the layer index (slope > max({GROW}, 2 "
        "stderr)) and the encoder's (of the same 6-6 model) does not -> holds; both grow -> "
        "partly holds; the decoder's does not -> does not hold"
    )
    return verdict_row("L3", prediction, measured, verdict, reason, FIGURE)


def mixln_flatter(results: dict) -> dict:
    prediction = "Mix-LN's per-layer gradient profile is flatter than Post-LN's and Pre-LN's"
    flags, parts = [], []
    for arch, stack in _stacks(results, "mixln"):
        ratio = {p: _fit(results, arch, p, stack) for p in ("post", "pre", "mixln")}
        if None in ratio.values():
            continue
        r = {p: f["max_over_min"] for p, f in ratio.items()}
        flags.append(r["mixln"] < min(r["post"], r["pre"]))
        parts.append(f"{arch} {stack}: max/min mixln {r['mixln']:.2f}, post {r['post']:.2f}, pre {r['pre']:.2f}")
    if not flags:
        return _missing("R5", prediction, "mixln beside post and pre")
    reason = (
        "rule: max/min over layers of the seed-mean ||E[grad]|| of "
        f"{KERNEL}; Mix-LN below both Post-LN and Pre-LN in every stack -> holds, in some "
        "-> partly holds, in none -> does not hold (Mix-LN is post for floor(L/4) layers: "
        "1 of 6)"
    )
    return verdict_row("R5", prediction, "; ".join(parts), _count_verdict(flags), reason, FIGURE)


def post_vanishing(results: dict) -> dict:
    prediction = "Post-LN gradients vanish (exponentially) toward the shallow layers: the gradient link of S1, at init"
    cells = _stacks(results, "post")
    if not cells:
        return _missing("S1", prediction, "post")
    fits_ = [_fit(results, a, "post", s) for a, s in cells]
    parts = [f"{a} {s}: {_describe(f)}" for (a, s), f in zip(cells, fits_, strict=True)]
    measured = (
        f"Post-LN {KERNEL} ||E[grad]|| per layer: "
        + "; ".join(parts)
        + ". The LN links of S1 are measured in ln_jacobian"
    )
    reason = (
        f"rule: ln||grad|| rises with the layer index (slope > max({GROW}, 2 stderr); "
        "exponential decay toward layer 0 = a linear trend in the log) in every stack -> "
        "holds, in some -> partly holds, in none -> does not hold"
    )
    return verdict_row("S1", prediction, measured, _count_verdict([grows(f) for f in fits_]), reason, FIGURE)


def pre_highway(results: dict) -> dict:
    prediction = "Pre-LN: gradients reach the first layer undamped (gradient part of S3, at init)"
    cells = _stacks(results, "pre")
    if not cells:
        return _missing("S3", prediction, "pre")
    fits_ = [_fit(results, a, "pre", s) for a, s in cells]
    parts = [
        f"{a} {s}: first/last layer {f['first_over_last']:.2f}, {_describe(f)}"
        for (a, s), f in zip(cells, fits_, strict=True)
    ]
    ok = [f["slope"] <= GROW + 2 * f["stderr"] for f in fits_]
    reason = (
        f"rule: no decay toward layer 0 beyond {GROW}/layer (slope of ln||grad|| per layer "
        f"<= {GROW} + 2 stderr) in every stack -> holds, in some -> partly holds, in none -> "
        "does not hold"
    )
    return verdict_row(
        "S3", prediction, f"Pre-LN {KERNEL} ||E[grad]||: " + "; ".join(parts), _count_verdict(ok), reason, FIGURE
    )


def verdicts(results: dict) -> list[dict]:
    return [
        fig3_profile(results),
        decoder_not_encoder(results),
        mixln_flatter(results),
        post_vanishing(results),
        pre_highway(results),
    ]
