"""diagnose's table (terminal and markdown) and its warnings, each drawn from a measured threshold."""

from __future__ import annotations

import os

import numpy as np

from normjax.io import read_json, write_text
from normjax.studies.diagnose import probe as diagnose_probe


def _num(v) -> str:
    return "-" if v is None or (isinstance(v, float) and not np.isfinite(v)) else f"{v:.3g}"


def _pair(values: dict, l: int) -> str:
    """The values of every norm site of layer l joined by "/" (site order in the header)."""
    cells = [values[site][l] for site in values]
    return "/".join(_num(v) for v in cells) if any(v is not None for v in cells) else "-"


def table_rows(stack: dict) -> list[list[str]]:
    """Header + one row per layer + the row of x_L (and the final norm, if any)."""
    grad = stack["ffn_grad"] or {}
    w2 = grad.get("ffn/fc2/kernel", {})
    rows = [
        [
            "layer",
            "placement",
            "rms x_l",
            "norm input scale",
            "|dN/dz|",
            "|J_block|",
            "W2 grad mean|g|",
            "W2 grad |E g|",
        ]
    ]
    for l in range(stack["num_layers"]):
        rows.append(
            [
                str(l),
                stack["placements"][l],
                _num(stack["stream_rms"][l]),
                _pair(stack["sigma"], l),
                _pair(stack["ln_jacobian"], l),
                _num(stack["block_norm"][l]),
                _num(w2["mean_of_norms"][l]) if w2 else "-",
                _num(w2["norm_of_mean"][l]) if w2 else "-",
            ]
        )
    final = stack["final_norm"] or {}
    rows.append(
        [
            "out",
            "final norm" if final else ("-" if stack.get("given_as_functions") else "(none)"),
            _num(stack["stream_rms"][-1]),
            _num(final.get("sigma")),
            _num(final.get("ln_jacobian")),
            "",
            "",
            "",
        ]
    )
    return rows


def _aligned(row: list[str], widths: list[int]) -> str:
    """The first column left-aligned, the numbers right-aligned."""
    return "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))


def format_table(results: dict, markdown: bool = False) -> str:
    """Every stack's per-layer table, aligned for a terminal or as markdown, then the warnings."""
    model, lines = results["model"], []
    for name in results["stack_order"]:
        stack = results["stacks"][name]
        rows = table_rows(stack)
        sites = "/".join(stack["sigma"]) or "none"
        per_head = any(site.endswith((".q", ".k", ".v")) for site in stack["sigma"])
        if stack.get("given_as_functions"):  # diagnose_blocks: a model of any framework
            lines.append(
                f"{'### ' if markdown else ''}{name}: {stack['num_layers']} blocks given as functions, d "
                f"{model['d_model']}; the norm and FFN gradient columns are measured on normjax models only"
            )
        else:
            lines.append(
                f"{'### ' if markdown else ''}{name} stack: {stack['num_layers']} layers, {model['norm']}, "
                f"d_model {model['d_model']}; norm columns list the sites {sites} "
                "(input scale: sigma for layernorm, rms for rmsnorm"
                + (
                    "; q/k/v norms act per head: ||dN/dz|| is the token's, sigma the mean over heads)"
                    if per_head
                    else ")"
                )
            )
        if markdown:
            cells = [[c.replace("|", "\\|") for c in r] for r in rows]
            lines += ["| " + " | ".join(cells[0]) + " |", "|" + "---|" * len(rows[0])]
            lines += ["| " + " | ".join(r) + " |" for r in cells[1:]]
        else:
            widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
            lines += [_aligned(rows[0], widths), "  ".join("-" * w for w in widths)]
            lines += [_aligned(r, widths) for r in rows[1:]]
        lines.append("")
    probe = results.get("probe")
    if probe:
        lines += [diagnose_probe.summary_line(probe, probe["signals"]), ""]
    elif "model" in results and "placement" in results["model"]:  # a normjax model: the probe can train it
        lines += [
            "at init only: add --config.probe_steps=30 and the run's --config.train.lr / warmup_steps / schedule / "
            "optimizer to probe early training (DeepNet's and Xiong et al.'s signals)",
            "",
        ]
    lines.append(f"{'### ' if markdown else ''}warnings" + ("" if results["warnings"] else ": none"))
    lines += [f"{'- ' if markdown else '  ! '}{w}" for w in results["warnings"]]
    return "\n".join(lines)


def write_markdown(results: dict, path: str) -> None:
    write_text(path, format_table(results, markdown=True) + "\n")


def _times(x: float) -> str:
    return f"{x:.1f}x" if x < 10 else f"{x:.0f}x"


def _stack_warnings(name: str, s: dict, t: dict) -> list[str]:
    out, rms = [], np.array(s["stream_rms"], np.float64)
    growth = rms[-1] / rms[0]
    if growth >= t["stream_growth"]:
        advice = (
            "keep the final norm"
            if s["final_norm"]
            else "add a norm after the last block"
            if s.get("given_as_functions")
            else "this stack has no final norm: add one (final_norm=True)"
        )
        out.append(
            f"{name}: residual stream grows {_times(growth)} over depth (rms {rms[0]:.3g} -> {rms[-1]:.3g}): {advice}"
        )
    w2 = (s["ffn_grad"] or {}).get("ffn/fc2/kernel")
    g = np.array(w2["mean_of_norms"] if w2 else [], np.float64)
    if g.size and not np.any(g):
        out.append(
            f"{name}: the FFN weights get no gradient at init (a zero gate on every branch): only the "
            "gates move at the first step"
        )
    elif g.size > 1 and g[0] > 0 and g[-1] > 0:
        ratio = g[-1] / g[0]
        if ratio >= t["grad_ratio"]:
            out.append(
                f"{name}: FFN gradient norm falls {_times(ratio)} from the top layer to the bottom "
                f"({g[-1]:.3g} at layer {len(g) - 1}, {g[0]:.3g} at layer 0): the first layers learn slowest"
            )
        elif 1 / ratio >= t["grad_ratio"]:
            out.append(
                f"{name}: FFN gradient norm grows {_times(1 / ratio)} from the top layer to the bottom "
                f"({g[-1]:.3g} -> {g[0]:.3g}): the first layers take the largest steps; keep warmup"
            )
    for site, values in s["ln_jacobian"].items():
        v = np.array([np.nan if x is None else x for x in values], np.float64)
        if np.nanmin(v) <= t["ln_jacobian"]:
            l = int(np.nanargmin(v))
            path = (
                "on the residual path"
                if site.endswith(".post")
                else "into the branch (the residual path bypasses this norm)"
            )
            out.append(
                f"{name}: ||dN/dz|| = {v[l]:.3g} at {site} of layer {l} (input sigma "
                f"{s['sigma'][site][l]:.3g}): gradients through this norm shrink {_times(1 / v[l])} {path}"
            )
    norms = np.array(s["block_norm"], np.float64)
    if norms.size and norms.max() >= t["block_norm"]:
        out.append(
            f"{name}: block {int(norms.argmax())} has Jacobian norm {norms.max():.3g}: a perturbation of its "
            "input can grow that much in one block"
        )
    return out


def _read(path: str):
    try:
        return read_json(path)
    except (OSError, ValueError):
        return None


FAILED = ("stalled", "diverged")  # the training outcomes of a run that did not train


def _lr_list(lrs) -> str:
    return ", ".join(f"{lr:g}" for lr in sorted(lrs))


def past_runs(workdir: str, placement: str, norm: str, depth: int) -> list[str]:
    """Runs without warmup that stalled or diverged in warmup_ablation / deep_training under `workdir` for this
    placement at this depth or shallower; silently nothing when those results are absent or unreadable."""
    out = []
    wa = _read(os.path.join(workdir, "warmup_ablation", "results.json"))
    rows = ((wa or {}).get("results") or {}).get("runs")
    if rows is None:
        sweep = _read(os.path.join(workdir, "warmup_ablation", "sweep.json")) or {}
        rows = [
            {
                "placement": r.get("overrides", {}).get("model.placement"),
                "warmup": r.get("overrides", {}).get("train.warmup_steps"),
                "depth": r.get("overrides", {}).get("model.num_layers"),
                "lr": r.get("overrides", {}).get("train.lr"),
                "outcome": (r.get("summary") or {}).get("outcome"),
            }
            for r in sweep.get("runs", [])
        ]
    base_depth = ((wa or {}).get("results") or {}).get("model", {}).get("num_layers")
    failed = {outcome: set() for outcome in FAILED}
    for r in rows:
        if (
            isinstance(r, dict)
            and r.get("placement") == placement
            and r.get("warmup") == 0
            and r.get("group", "") in ("", "depth_lr")  # not the optimizer or constant-schedule arms
            and r.get("outcome") in FAILED
            and (r.get("depth") or base_depth or depth) <= depth
            and r.get("lr") is not None
        ):
            failed[r["outcome"]].add(r["lr"])
    parts = [f"{outcome} at lr {_lr_list(lrs)}" for outcome, lrs in failed.items() if lrs]
    if parts:
        out.append(
            f"{placement} at this depth or shallower failed without warmup in warmup_ablation "
            f"({'; '.join(parts)}): use warmup"
        )
    dt = (_read(os.path.join(workdir, "deep_training", "results.json")) or {}).get("results") or {}
    lr = (dt.get("setup") or {}).get("lr")
    for run, by_depth in (dt.get("summary") or {}).items():
        run_placement, _, run_norm = str(run).partition(":")
        if run_placement != placement or (run_norm or "layernorm") != norm or not isinstance(by_depth, dict):
            continue
        bad = sorted(
            int(d)
            for d, rec in by_depth.items()
            if str(d).isdigit()
            and int(d) <= depth
            and isinstance(rec, dict)
            and (rec.get("diverged_step") is not None or rec.get("outcome") in FAILED)
        )
        if bad:
            out.append(
                f"{placement} stalled or diverged without warmup in deep_training at depth {', '.join(map(str, bad))}"
                + (f" (lr {lr:g})" if isinstance(lr, int | float) else "")
                + ": use warmup"
            )
    return out


def warnings(results: dict, cfg, thresholds: dict, workdir: str) -> list[str]:
    """Plain-language warnings: each fires when a measurement crosses config.thresholds."""
    out = []
    if results.get("grad_error"):
        out.append(f"gradients are not finite at init: {results['grad_error']}")
    for name in results["stack_order"]:
        out += _stack_warnings(name, results["stacks"][name], thresholds)
    if cfg is not None and isinstance(cfg.placement, str):  # cfg None: a model given as block functions
        for stack in cfg.stacks:
            out += [w for w in past_runs(workdir, cfg.placement, cfg.norm, cfg.stack_depth(stack)) if w not in out]
    return out
