"""Placements: one small wiring per placement of the norm around a residual branch F, and the registry.

Every wiring has the signature `wire(s, x, F, rec, gate)`: `s` is the Sublayer (its norms `s.norm`,
`s.norm2` and constants), `x` the residual stream, `F` the branch, `rec(role, z)` records a norm input and
returns it, `gate` the learnable scalar or per-channel multiplier where the placement has one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable


def post(s, x, F, rec, gate):  # Vaswani 2017: x = N(x + F(x))
    return s.norm(rec("post", x + F(x)))


def pre(s, x, F, rec, gate):  # x = x + F(N(x))
    return x + F(s.norm(rec("pre", x)))


def sandwich(s, x, F, rec, gate):  # Peri-LN / Sandwich-LN: x = x + N2(F(N1(x)))
    return x + s.norm2(rec("branch", F(s.norm(rec("pre", x)))))


def branch_post(s, x, F, rec, gate):  # praxis "post": x = x + N(F(x)); not Post-LN
    return x + s.norm(rec("branch", F(x)))


def deepnorm(s, x, F, rec, gate):  # Wang 2022: x = N(alpha * x + F(x))
    return s.norm(rec("post", s.alpha * x + F(x)))


def admin(s, x, F, rec, gate):  # Liu 2020: x = N(omega * x + F(x)), omega per channel
    return s.norm(rec("post", s.omega[...].astype(x.dtype) * x + F(x)))


def rezero(s, x, F, rec, gate):  # Bachlechner 2020 (and SkipInit, De & Smith 2020): x = x + alpha F(x)
    return x + gate * F(x)


def layerscale(s, x, F, rec, gate):  # CaiT: x = x + lambda * F(N(x)), lambda per channel
    return x + gate * F(s.norm(rec("pre", x)))


def plain_residual(s, x, F, rec, gate):  # T-Fixup (no norm) and HybridNorm's attention: x = x + F(x)
    return x + F(x)


@dataclasses.dataclass(frozen=True)
class Wiring:
    """How one placement wires a sublayer: the function, its norms, its gate."""

    fn: Callable
    norms: int = 1  # how many norms around the branch (0, 1 or 2)
    gate: str = "none"  # "none", "scalar" or "channel"
    qkv_norm: bool = False  # attention normalises q, k, v inside the branch


WIRINGS = {
    "post": Wiring(post),
    "pre": Wiring(pre),
    "sandwich": Wiring(sandwich, norms=2),
    "branch_post": Wiring(branch_post),
    "deepnorm": Wiring(deepnorm),
    "admin": Wiring(admin),
    "rezero": Wiring(rezero, norms=0, gate="scalar"),
    "skipinit": Wiring(rezero, norms=0, gate="scalar"),
    "layerscale": Wiring(layerscale, gate="channel"),
    "tfixup": Wiring(plain_residual, norms=0),
}
# HybridNorm (Zhuo 2025) wires attention and FFN differently: QKV-norm inside attention, Post-LN on the FFN.
HYBRID = {
    "attn": Wiring(plain_residual, norms=0, qkv_norm=True),
    "cross": Wiring(plain_residual, norms=0, qkv_norm=True),
    "ffn": WIRINGS["post"],
}


def wiring(placement: str, sublayer: str) -> Wiring:
    """The wiring of `sublayer` ("attn", "cross" or "ffn") in a block with `placement`."""
    if placement == "hybrid":
        return HYBRID[sublayer]
    if placement not in WIRINGS:
        raise ValueError(
            f"unknown per-layer placement {placement!r}: valid choices are {', '.join(sorted(WIRINGS) + ['hybrid'])}"
        )
    return WIRINGS[placement]
