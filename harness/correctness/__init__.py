"""harness.correctness."""
