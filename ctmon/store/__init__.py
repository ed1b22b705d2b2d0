"""Pure session model: events in, state out. No torch, no textual, no I/O."""

from ctmon.store.records import ExitInfo, LogEntry
from ctmon.store.session import Session

__all__ = ["ExitInfo", "LogEntry", "Session"]
