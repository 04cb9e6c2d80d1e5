"""The merge gate's verdict vocabulary, part of compare.json's schema: the gate decides with it and the report
renders it, so it lives below both (the report layer never imports the gate)."""

from __future__ import annotations

# Verdicts of the timing; the other outcomes say why a case has none.
TIMING_VERDICTS = ("SLOWER", "FASTER", "SAME", "INCONCLUSIVE")
OUTCOMES = TIMING_VERDICTS + ("WRONG", "ERROR", "NOT-COMPARED")
FAILING = ("SLOWER", "WRONG", "ERROR")     # what makes the gate exit 1
