"""The report layer: results in, Markdown and PNGs out; never needs a GPU or the timing engine."""

from harness.report.render import render_report

__all__ = ["render_report"]
