"""harness.target."""
