"""Nsight Compute profiling: the ncu command (``ncu.py``), the metric table (``metrics.py``), the raw-page
parser (``parse.py``), the bottleneck rules (``diagnose.py``), one kernel's run (``runner.py``) and the
process ncu profiles (``target.py``). The records live in harness.results.profile, so the report reads
them without this package."""
