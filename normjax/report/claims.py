"""The claims the project checks (ids and short titles of CLAIMS.md) and the verdict row a study emits."""

from __future__ import annotations

import dataclasses

EMPIRICAL = ("holds", "partly holds", "does not hold", "not testable at this scale")
CONSTRUCTION = "verified by construction"  # a check of how the code is written, counted apart from findings
VERDICTS = EMPIRICAL + (CONSTRUCTION,)

CLAIMS = {
    "S1": "Post-LN: LN input grows with depth, dLN/dz shrinks, gradients vanish toward shallow layers",
    "S2": "LN divides by sigma_l ~ sqrt(l): gradient ~ 1/depth near the output, explodes near the input",
    "S3": "Pre-LN identity path: dx_L/dx_l = I + sum dF/dx, gradients reach layer 1 undamped",
    "S4": "Pre-LN residual stream grows without bound with depth; a final norm is needed",
    "S5": "Post-LN needs warmup; Pre-LN tolerates larger lr and short or no warmup",
    "S6": "Pre-LN and Post-LN cost the same time and memory per step",
    "S7": "ReZero is the identity at init; DeepNorm lets Post-LN scale to very deep stacks",
    "X1": "Post-LN x = LN(x + F(x)); Pre-LN x = x + F(LN(x)) plus a final LN",
    "X2": "Theory setting: one head, W^Q = W^K = 0, N(0, 1/d) weights, gamma 1, beta 0",
    "X3": "Lemma 2: Post-LN E||LN input||^2 = 3d/2; Pre-LN (1 + l/2)d <= E||x_l||^2 <= (1 + 3l/2)d",
    "X4": "LN Jacobian (1/sigma) diag(gamma)(I - 11^T/d - zz^T/d), spectral norm max|gamma|/sigma",
    "X5": "Theorem 1: last FFN gradient O(d sqrt(ln d)) for Post-LN, O(d sqrt(ln d / L)) for Pre-LN",
    "X6": "Fig. 3: Post-LN FFN gradient grows with layer index, Pre-LN about flat (||E[grad]||)",
    "X7": "Fig. 2: Post-LN without warmup fails on IWSLT14; Pre-LN without warmup trains sooner",
    "X8": "IWSLT settings: 6-6, d 512, FFN 1024, 4 heads, label smoothing 0.1, dropout 0.1",
    "L1": "Output change after an update grows O(N) for Post-LN, O(log N) for Pre-LN and Admin",
    "L2": "Admin omega from profiling; closed form sqrt((N+1)/ln(N+1) - 1)",
    "L3": "At init, Post-LN's gradient vanishing shows in the decoder, not the encoder",
    "D1": "DeepNorm alpha/beta per topology; beta scales FFN, W^V, W^O, not W^Q, W^K",
    "D2": "Early update ||F(x, theta_t) - F(x, theta_0)|| grows with depth for Post-LN, flat for DeepNorm",
    "D3": "Post-LN without warmup: exploding update, LN inputs grow >> sqrt(d), gradients vanish",
    "R1": "ReZero: input-output Jacobian exactly I at init; only alpha gets a gradient at step 0",
    "R2": "Jacobian log-singular-value spread widens with depth for Post-LN; ReZero all ones",
    "R3": "T-Fixup: no LN, no warmup; 0.67 N^(-1/4) encoder, (9M)^(-1/4) decoder scaling",
    "R4": "Peri-LN/Sandwich: hidden variance grows about linearly; Pre-LN can grow faster in training",
    "R5": "Mix-LN (post first quarter, pre after) gives a flatter per-layer gradient profile",
    "R6": "DyT gamma tanh(alpha x) + beta, alpha_0 = 0.5, can replace the norm in Pre-LN",
    "R7": "Noam peak 6.988e-4 at step 4000 for d = 512; fairseq inverse_sqrt ramps from warmup_init_lr",
}


@dataclasses.dataclass(frozen=True)
class Verdict:
    """One row of the report: what a claim predicts, what was measured, and the verdict a rule gave."""

    claim: str
    prediction: str
    measured: str  # the numbers, in words: "slope -0.49 +- 0.03 (3 seeds)"
    verdict: str  # one of VERDICTS
    reason: str  # which rule gave the verdict, or why it is not testable here
    figure: str | None = None  # path relative to the study folder
    numbers: dict = dataclasses.field(default_factory=dict)
    key: str = ""  # the one number (with its interval) that decides, for the report's summary table

    def __post_init__(self):
        if self.claim not in CLAIMS:
            raise ValueError(f"unknown claim {self.claim!r}: valid ids are {', '.join(CLAIMS)}")
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {VERDICTS}")


def verdict_row(
    claim: str,
    prediction: str,
    measured: str,
    verdict: str,
    reason: str,
    figure: str | None = None,
    key: str = "",
    **numbers,
) -> dict:
    """A validated Verdict as a JSON-ready dict: one row a study's rules return."""
    return dataclasses.asdict(Verdict(claim, prediction, measured, verdict, reason, figure, numbers, key))
