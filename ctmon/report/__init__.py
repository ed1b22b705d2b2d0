"""Reports built from the store: JSON (stable, documented), text, Markdown."""

from ctmon.report.build import REPORT_VERSION, build_report

__all__ = ["REPORT_VERSION", "build_report"]
