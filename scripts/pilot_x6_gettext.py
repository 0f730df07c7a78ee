"""Pilot runs (seeds 1000-1004, never judged) of X6's real-batch arm, for its FLAT_SHARE threshold.

  python scripts/pilot_x6_gettext.py [--out=docs/results/grad_norms_at_init/pilot_gettext.json]

Measures grad_norms_at_init's gettext arm at the :standard preset (the 6-6 model, Post-LN and Pre-LN, the same
batches per seed) on the pilot seeds and writes each placement's per-seed decoder slopes of ln||E[grad W^2]|| per
layer, their mean and 95% interval, and X6's two checks at FLAT_SHARE and at +-50% of it, so the value that the
rule uses (normjax.studies.grad_norms_at_init.verdicts.THRESHOLDS) can be checked against the pilot.
"""

from __future__ import annotations

import argparse

from normjax.io import write_json
from normjax.studies.grad_norms_at_init import config as study_config
from normjax.studies.grad_norms_at_init import measure, verdicts
from normjax.studies.grad_norms_at_init.measure import _aggregate

PILOT_SEEDS = [1000, 1001, 1002, 1003, 1004]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="docs/results/grad_norms_at_init/pilot_gettext.json")
    args = parser.parse_args(argv)
    config = study_config.get_config("standard")
    profiles, summary = {}, {"seeds": PILOT_SEEDS, "preset": "standard", "placements": {}}
    for placement in config.gettext_placements:
        runs = [measure.measure_gettext(config, placement, seed) for seed in PILOT_SEEDS]
        profiles[placement] = _aggregate(runs)["decoder"][verdicts.KERNEL][verdicts.METRIC]
        est = verdicts.slope(profiles[placement])
        summary["placements"][placement] = {"slopes": list(profiles[placement]["slope"]), "mean": est.mean}
        summary["placements"][placement] |= {"ci95": [est.lo, est.hi]}
        print(f"{placement}: decoder slope {est.text('+.3f')}/layer", flush=True)
    share = verdicts.THRESHOLDS["FLAT_SHARE"]
    summary["checks"] = {"grows(post)": verdicts.grows(profiles["post"]).value}
    for factor in (-0.5, 0.0, 0.5):
        value = share.moved(factor)
        band = value * abs(verdicts.slope(profiles["post"]).mean)
        check = verdicts.slope(profiles["pre"]).within(-band, band)
        summary["checks"][f"flat_relative(pre) at FLAT_SHARE {value:g} (band +-{band:.3f})"] = check.value
    print(summary["checks"], flush=True)
    write_json(args.out, summary)


if __name__ == "__main__":
    main()
