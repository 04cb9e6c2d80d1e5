"""harness.results."""
