"""A number a rule or a warning compares a measurement with, and why it has that value."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Threshold:
    """A number a rule compares a measurement with, and why it has that value (shown in docs/claims.md)."""

    value: float
    why: str

    def __float__(self) -> float:
        return float(self.value)
