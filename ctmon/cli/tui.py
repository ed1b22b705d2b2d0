"""Running the TUI from the command line."""

from __future__ import annotations

import os
import signal
from types import FrameType
from typing import Any


def run_app(app: Any) -> Any:
    """Run a Textual app; if the terminal goes away (SIGHUP: SSH dropped,
    window closed), leave at once -- there is nothing left to restore or to
    print to, and the job, under its own supervisor, runs on regardless.
    (Textual's orderly shutdown can block forever writing to a dead tty.)"""
    previous = signal.signal(signal.SIGHUP, _hangup)
    try:
        return app.run()
    finally:
        signal.signal(signal.SIGHUP, previous)


def _hangup(signum: int, frame: FrameType | None) -> None:
    os._exit(128 + signal.SIGHUP)
