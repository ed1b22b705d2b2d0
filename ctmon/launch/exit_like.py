"""ctmon's own exit, the way the job left."""

from __future__ import annotations

import os
import signal
import sys
import time

from ctmon.launch import signal_policy
from ctmon.store import ExitInfo


def exit_like(info: ExitInfo) -> int:
    """Leave ctmon the way the job left: same exit code, or same signal."""
    if info.code is not None:
        return info.code
    if info.signal:
        sig = signal_policy.signal_number(info.signal)
        if sig is not None:
            sys.stdout.flush()
            sys.stderr.flush()
            try:
                signal.signal(sig, signal.SIG_DFL)
            except (OSError, ValueError):
                pass
            os.kill(os.getpid(), sig)
            time.sleep(0.5)
    return info.status
