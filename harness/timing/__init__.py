"""harness.timing."""
