"""The report: every claim of the registry (docs/claims.md) with its prediction, measurement and verdict."""

from normjax.report.claims import CLAIMS, VERDICTS, Verdict, verdict_row

__all__ = ["CLAIMS", "VERDICTS", "Verdict", "verdict_row"]
