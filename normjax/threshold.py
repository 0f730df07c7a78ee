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
    unit: float | None = None  # an additive scale: the value moves by factor x unit (thresholds at 0 need one)
    bounded: bool = False  # a value bounded by 1 (r^2, a fraction kept): moved on the complement 1 - value

    def __float__(self) -> float:
        return float(self.value)

    def moved(self, factor: float) -> float:
        """The value moved by `factor` (e.g. -0.5, +0.5) on the threshold's own scale: by factor x unit where it
        has a unit (thresholds at 0, whose relative move is none), on the complement 1 - value where it is
        bounded by 1 (so +50% of 0.9 is 0.85 and 0.95, never 1.35), else by factor x value."""
        if self.unit is not None:
            return self.value + factor * self.unit
        if self.bounded:
            return 1.0 - (1.0 - self.value) * (1.0 + factor)
        return self.value * (1.0 + factor)

    @property
    def scale(self) -> str:
        """How `moved` moves it, in words (for the report's sensitivity table)."""
        if self.unit is not None:
            return f"additive, unit {self.unit:g}"
        return "complement 1 - value" if self.bounded else "relative"
