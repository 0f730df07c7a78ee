"""A number a rule or a warning compares a measurement with, and why it has that value."""

from __future__ import annotations

import dataclasses

SOURCES = {
    "paper": "a number the paper states",
    "theory": "a consequence of the math or of float rounding and sampling error",
    "convention": "an effect size chosen before the data (e.g. 2x, 10%), not read off any seed",
    "pilot": "an effect size fixed before the judged run, then checked unchanged on pilot seeds (1000 on, never "
    "judged) at the same preset: `why` gives the pilot's numbers and says where the value is knife-edge on them",
}


@dataclasses.dataclass(frozen=True)
class Threshold:
    """A number a rule compares a measurement with, and why it has that value (shown in docs/claims.md)."""

    value: float
    why: str
    source: str = ""  # where the value comes from: one of SOURCES ("" when not stated)

    def __float__(self) -> float:
        return float(self.value)
