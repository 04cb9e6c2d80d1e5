"""harness.workers."""
