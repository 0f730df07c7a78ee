"""Verdict rules of grad_norms_at_init: per-layer FFN gradient profiles (X6, L3, R5, S1, S3)."""

from __future__ import annotations

import numpy as np

from normjax.report import verdict_row
from normjax.report.rules import Check, Estimate, Threshold, combine, mean_ci, power_note, require_seeds

KERNEL = "ffn/fc2/kernel"  # W^2 of Xiong et al.'s FFN; fc1 is reported beside it
METRIC = "norm_of_mean"  # Xiong et al.'s ||E[grad]||; the mean of per-batch norms is reported too
FIGURE = "grad_fc2.png"

THRESHOLDS = {
    "TREND": Threshold(
        0.05,
        "slope of ln||E[grad]|| per layer: above +0.05 (the whole 95% interval over seeds) the gradient grows with "
        "the layer index, below -0.05 it shrinks, inside [-0.05, 0.05] it is flat. 0.05/layer is a 1.28x change over "
        "6 layers, against about 10x in Xiong et al.'s Fig. 3 for Post-LN; the per-seed slopes spread by 0.015 to "
        "0.055 (std over 3 seeds at the quick preset; 95% half-widths 0.04 to 0.14), the Post-LN decoder's mean "
        "slope is +0.40",
        source="convention",
    ),
    "FLATTER": Threshold(
        0.0,
        "Mix-LN is flatter when ln(max/min over layers) of the best of Post-LN and Pre-LN minus Mix-LN's has its "
        "whole 95% interval over seeds above 0 (an ordering: any margin the seeds resolve counts); the per-seed "
        "ln(max/min) spreads by 0.05 to 0.3 (std over 3 seeds, quick preset)",
        source="theory",
    ),
}


def _trend() -> float:
    """TREND's value, read when a rule runs (so the report's sensitivity table can move it)."""
    return THRESHOLDS["TREND"].value


def _profile(results, arch, placement, stack, name=KERNEL, metric=METRIC) -> dict | None:
    agg = results["runs"].get(arch, {}).get(placement)
    return None if agg is None or stack not in agg else agg[stack][name][metric]


def slope(profile: dict) -> Estimate:
    """Across-seed mean and 95% interval of the per-seed slope of ln||grad|| per layer."""
    return mean_ci(profile["slope"])


def grows(profile: dict) -> Check:
    """The gradient rises with the layer index: the slope's whole interval lies above TREND."""
    return slope(profile).above(_trend())


def flat(profile: dict) -> Check:
    """No trend: the slope's whole interval lies inside [-TREND, TREND]."""
    return slope(profile).within(-_trend(), _trend())


def no_decay_toward_input(profile: dict) -> Check:
    """Gradients do not shrink toward layer 0 beyond TREND per layer: the slope's whole interval below TREND."""
    return slope(profile).below(_trend())


def _stacks(results, placement) -> list[tuple[str, str]]:
    return [(a, s) for a, by_p in results["runs"].items() if placement in by_p for s in by_p[placement]]


def _describe(profile: dict) -> str:
    return f"slope {slope(profile).text('+.3f')}/layer, max/min {mean_ci(profile['max_over_min']).text('.2f')}"


def _cell(arch: str, stack: str) -> str:
    """A short name of one stack of one model: "6-6 dec", "encoder-only enc"."""
    return f"{'6-6' if arch == 'encoder_decoder' else arch + '-only'} {stack[:3]}"


def _seeds(results) -> str:
    return f"{results['num_seeds']} seeds"


def _missing(claim, prediction, what):
    return verdict_row(claim, prediction, f"{what} not run", "not testable at this scale", f"the config has no {what}")


def _trend_words() -> str:
    TREND = _trend()
    return (
        f"'grows' = the 95% interval over seeds of the per-seed slope of ln||E[grad]|| per layer lies above "
        f"+{TREND}, 'flat' = it lies inside [-{TREND}, {TREND}]"
    )


def fig3_profile(results: dict) -> dict:
    prediction = "6-6 Transformer at init: Post-LN FFN gradient grows with layer index, Pre-LN flat"
    checks, parts, keys, notes = [], [], [], []
    for stack in ("encoder", "decoder"):
        post, pre = (_profile(results, "encoder_decoder", p, stack) for p in ("post", "pre"))
        if post is None or pre is None:
            return _missing("X6", prediction, "encoder_decoder post and pre")
        checks += [grows(post), flat(pre)]
        notes.append(power_note(f"Pre-LN {stack} slope", slope(pre), -_trend(), _trend()))
        other = {p: _profile(results, "encoder_decoder", p, stack, metric="mean_of_norms") for p in ("post", "pre")}
        parts.append(
            f"{stack}: post {_describe(post)}, pre {_describe(pre)} (mean of per-batch norms: post slope "
            f"{slope(other['post']).mean:+.3f}, pre {slope(other['pre']).mean:+.3f})"
        )
        keys.append(f"{stack[:3]} post {slope(post).text('+.2f')}, pre {slope(pre).text('+.2f')}")
    measured = f"||E[grad]|| of {KERNEL} over {results['num_batches']} batches; " + "; ".join(parts)
    reason = (
        f"rule: {_trend_words()}; four checks (post grows, pre flat, in the encoder and the decoder): all -> holds, "
        "none -> does not hold, else partly holds (a straddling interval is inconclusive)" + "".join(notes)
    )
    key = "slope/layer: " + "; ".join(keys)
    return verdict_row("X6", prediction, measured, combine(checks), reason, FIGURE, key=key, checks=checks)


def decoder_not_encoder(results: dict) -> dict:
    prediction = "At init, Post-LN's gradient vanishing (toward shallow layers) is in the decoder"
    dec, enc = (_profile(results, "encoder_decoder", "post", s) for s in ("decoder", "encoder"))
    if dec is None or enc is None:
        return _missing("L3", prediction, "encoder_decoder post")
    alone = _profile(results, "encoder", "post", "encoder")
    TREND, dec_grows = _trend(), grows(dec)
    verdict = "does not hold" if dec_grows is Check.CONTRADICTED else combine([dec_grows, slope(enc).below(TREND)])
    measured = f"Post-LN {KERNEL} ||E[grad]||: decoder {_describe(dec)}; encoder {_describe(enc)}" + (
        "" if alone is None else f"; encoder-only model {_describe(alone)}"
    )
    reason = (
        f"rule: the decoder's slope interval lies above +{TREND}/layer (grows) and the encoder's (same 6-6 model) "
        f"below +{TREND} (does not grow) -> holds; the decoder grows but the encoder's interval lies at or above "
        f"+{TREND} -> partly holds; the decoder's lies at or below it -> does not hold; an interval that straddles "
        f"+{TREND} is inconclusive (95% intervals over {_seeds(results)})"
    )
    key = f"dec slope {slope(dec).text('+.2f')}, enc {slope(enc).text('+.2f')}"
    return verdict_row("L3", prediction, measured, verdict, reason, FIGURE, key=key)


def _log_range_margin(results, arch, stack) -> Estimate | None:
    """Per seed: min(ln max/min of Post-LN, of Pre-LN) - ln max/min of Mix-LN; its mean and interval."""
    profiles = {p: _profile(results, arch, p, stack) for p in ("post", "pre", "mixln")}
    if None in profiles.values():
        return None
    log_r = {p: np.log(np.asarray(f["max_over_min"], float)) for p, f in profiles.items()}
    return mean_ci(np.minimum(log_r["post"], log_r["pre"]) - log_r["mixln"])


def mixln_flatter(results: dict) -> dict:
    prediction = "Mix-LN's per-layer gradient profile is flatter than Post-LN's and Pre-LN's"
    flatter = THRESHOLDS["FLATTER"].value
    flags, parts, keys = [], [], []
    for arch, stack in _stacks(results, "mixln"):
        margin = _log_range_margin(results, arch, stack)
        if margin is None:
            continue
        flags.append(margin.above(flatter))
        r = {p: mean_ci(_profile(results, arch, p, stack)["max_over_min"]).mean for p in ("mixln", "post", "pre")}
        parts.append(
            f"{arch} {stack}: max/min mixln {r['mixln']:.2f}, post {r['post']:.2f}, pre {r['pre']:.2f}; "
            f"ln-range margin {margin.text('+.2f')}"
        )
        keys.append(f"{_cell(arch, stack)} {margin.text('+.2f')}")
    if not flags:
        return _missing("R5", prediction, "mixln beside post and pre")
    reason = (
        f"rule: per seed, margin = min(ln max/min of Post-LN, of Pre-LN) - ln max/min of Mix-LN over the layers of "
        f"||E[grad]|| of {KERNEL}; Mix-LN is flatter in a stack when the margin's 95% interval over seeds lies above "
        f"{flatter:g}; in every stack -> holds, in some -> partly holds, in none -> does not hold (Mix-LN is post "
        "for floor(L/4) layers: 1 of 6)"
    )
    return verdict_row(
        "R5", prediction, "; ".join(parts), combine(flags), reason, FIGURE, key="margin " + "; ".join(keys)
    )


def post_vanishing(results: dict) -> dict:
    prediction = "Post-LN gradients vanish (exponentially) toward the shallow layers: the gradient link of S1, at init"
    cells = _stacks(results, "post")
    if not cells:
        return _missing("S1", prediction, "post")
    profiles = [_profile(results, a, "post", s) for a, s in cells]
    parts = [f"{a} {s}: {_describe(f)}" for (a, s), f in zip(cells, profiles, strict=True)]
    measured = f"Post-LN {KERNEL} ||E[grad]|| per layer: {'; '.join(parts)}. The LN links of S1 are in ln_jacobian"
    reason = (
        f"rule: {_trend_words()} (exponential decay toward layer 0 = a linear trend in the log); grows in every "
        "stack -> holds, in some -> partly holds, in none -> does not hold"
    )
    key = "; ".join(f"{_cell(a, s)} {slope(f).text('+.2f')}" for (a, s), f in zip(cells, profiles, strict=True))
    return verdict_row(
        "S1", prediction, measured, combine(grows(f) for f in profiles), reason, FIGURE, key="slope " + key
    )


def pre_highway(results: dict) -> dict:
    TREND = _trend()
    prediction = "Pre-LN: gradients reach the first layer undamped (gradient part of S3, at init)"
    cells = _stacks(results, "pre")
    if not cells:
        return _missing("S3", prediction, "pre")
    profiles = [_profile(results, a, "pre", s) for a, s in cells]
    parts = [
        f"{a} {s}: first/last layer {mean_ci(f['first_over_last']).text('.2f')}, {_describe(f)}"
        for (a, s), f in zip(cells, profiles, strict=True)
    ]
    reason = (
        f"rule: no decay toward layer 0 beyond {TREND}/layer (the 95% interval over seeds of the slope of "
        f"ln||E[grad]|| per layer lies below +{TREND}) in every stack -> holds, in some -> partly holds, in none -> "
        "does not hold"
    )
    key = "; ".join(f"{_cell(a, s)} {slope(f).text('+.2f')}" for (a, s), f in zip(cells, profiles, strict=True))
    return verdict_row(
        "S3",
        prediction,
        f"Pre-LN {KERNEL} ||E[grad]||: " + "; ".join(parts),
        combine(no_decay_toward_input(f) for f in profiles),
        reason,
        FIGURE,
        key="slope " + key,
    )


def verdicts(results: dict) -> list[dict]:
    rows = [
        fig3_profile(results),
        decoder_not_encoder(results),
        mixln_flatter(results),
        post_vanishing(results),
        pre_highway(results),
    ]
    return require_seeds(rows, results["num_seeds"])
