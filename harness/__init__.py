"""kernel-harness: declare a kernel once, get tests, benchmarks and reports."""

__version__ = "0.1.0"
