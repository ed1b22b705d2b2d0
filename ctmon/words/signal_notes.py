"""The note ctmon's supervisor writes when it signals the job, and reads back.

The supervisor writes it into the recording (ctmon/launch/job.py); the
findings read it back to tell a signal ctmon sent from one the job got
elsewhere (ctmon/findings/silent.py): one spelling for both.
"""

from __future__ import annotations

PASSED_ON = "passed on: ctmon received it"  # the reason given for a signal ctmon received and passed on


def sent_signal_message(signal: str, reason: str) -> str:
    """``sent SIGKILL to the job (Ctrl-C twice)``: read back by ``signal_sent_by_ctmon``."""
    return f"sent {signal} to the job ({reason})"
