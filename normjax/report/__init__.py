"""The report: every claim of the registry (docs/claims.md) with its prediction, measurement and verdict."""

from normjax.report.claims import CLAIMS, VERDICTS, Verdict, verdict_row
from normjax.report.rules import Check, claim_verdict, combine

__all__ = ["CLAIMS", "VERDICTS", "Check", "Verdict", "claim_verdict", "combine", "verdict_row"]
