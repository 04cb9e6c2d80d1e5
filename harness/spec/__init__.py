"""harness.spec."""
