"""The exception that ended the process, said by the process itself.

When an exception reaches the top, Python prints its traceback and keeps it
in ``sys.last_exc`` (3.12; ``sys.last_value`` before) *before* ``atexit``
handlers run -- where the agent says goodbye. So no hook on
``sys.excepthook`` is needed (the job's own stays in place). The viewer can
then say which rank raised what at which line of the user's code, which the
job's stderr alone cannot when several ranks print their tracebacks into it
at once.
"""

from __future__ import annotations

import sys
import time
import traceback

from ctmon.agent.paths import is_own_file
from ctmon.wire import protocol

_NOT_FAILURES = (KeyboardInterrupt, SystemExit)


def uncaught_event() -> protocol.Event | None:
    exc = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    if not isinstance(exc, BaseException) or isinstance(exc, _NOT_FAILURES):
        return None
    ev: protocol.Event = {
        "kind": protocol.UNCAUGHT,
        "t": time.time(),
        "type": protocol.clip(type(exc).__name__, 200),
        "message": protocol.clip(str(exc), 2000),
    }
    try:
        frames = list(traceback.extract_tb(exc.__traceback__))
    except Exception:
        frames = []
    own = [f for f in frames if is_own_file(f.filename)]
    where = own[-1] if own else (frames[-1] if frames else None)
    if where is not None:
        ev["file"] = protocol.clip(where.filename, 2000)
        ev["line"] = where.lineno
        ev["fn"] = protocol.clip(where.name, 200)
    return ev
