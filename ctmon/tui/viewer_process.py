"""The viewer's own process: the signals that end it, and its garbage
collector's thresholds for a large, long-lived store."""

from __future__ import annotations

import gc
import signal


def _leave_signals() -> tuple[int, ...]:
    """The signals whose default action would end the viewer's process and
    that it can catch, SIGHUP and SIGINT aside (Ctrl-C is a key here; run_app
    handles a hang-up). The viewer has no use for any of them: it cannot pass
    them on to a job (a viewer's controls are interrupt, terminate, kill and
    stop), so each ends it as SIGTERM does, in order, never leaving the
    terminal in the alternate screen. Faults (SIGSEGV, SIGBUS, ...) keep their
    default: no handler can resume the code that faulted."""
    names = "SIGTERM SIGQUIT SIGALRM SIGUSR1 SIGUSR2 SIGVTALRM SIGPROF SIGIO SIGPWR SIGSTKFLT SIGXCPU SIGXFSZ".split()
    sigs = [int(getattr(signal, n)) for n in names if hasattr(signal, n)]
    if hasattr(signal, "SIGRTMIN") and hasattr(signal, "SIGRTMAX"):
        sigs += range(int(signal.SIGRTMIN), int(signal.SIGRTMAX) + 1)
    return tuple(sigs)


LEAVE_SIGNALS = _leave_signals()


GC_THRESHOLDS = (20_000, 100, 100)


def tune_gc() -> None:
    """The viewer keeps a large, long-lived store: with the default
    thresholds the collector walks it over and over (a quarter of the time
    and 0.4 s pauses while a 200k-event backlog is folded). Fewer young
    collections keep the screen smooth."""
    if gc.get_threshold()[0] < GC_THRESHOLDS[0]:
        gc.set_threshold(*GC_THRESHOLDS)
