"""The report: every claim of CLAIMS.md with its prediction, measurement and verdict."""

from normjax.report.claims import CLAIMS, VERDICTS, Verdict, verdict_row

__all__ = ["CLAIMS", "VERDICTS", "Verdict", "verdict_row"]
