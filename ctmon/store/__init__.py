"""Pure session model: events in, state out. No torch, no textual, no I/O."""

from ctmon.store.session import ExitInfo, LogEntry, Session

__all__ = ["ExitInfo", "LogEntry", "Session"]
