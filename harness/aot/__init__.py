"""harness.aot."""
