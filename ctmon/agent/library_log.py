"""What a library says about itself: Hugging Face transformers' warnings.

transformers explains its own slow paths in its log -- "`use_cache=True` is
incompatible with gradient checkpointing. Setting `use_cache=False`." -- and
that text is often the fix a finding about its code should name. Under
torch.compile the logging call is itself a graph break (Dynamo does not trace
``logger.warning_once``), so the break's site and the message's are the same
line: the store joins them by file:line.

A handler on the ``transformers`` logger, added once the library sets its
logging up. It prints nothing and filters nothing (the library's own handler
still writes the message exactly as before); on the job's thread it only finds
the calling line -- the frame below ``warning_once``, which makes every message
look as if logging.py logged it -- and queues one record. Each distinct message
is sent once, at most ``MAX_MESSAGES`` of them.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from types import FrameType

from ctmon.wire import protocol

LOGGER = "transformers"
LOGGING_MODULE = "transformers.utils.logging"
MAX_MESSAGES = 200
# frames that are the logging machinery, not the caller
_SKIP = (
    os.sep + "logging" + os.sep,
    os.sep + "transformers" + os.sep + "utils" + os.sep + "logging.py",
    "functools.py",
)


class LibraryLog(logging.Handler):
    def __init__(self, put: Callable[[protocol.Event], object]) -> None:
        super().__init__(level=logging.WARNING)
        self._put = put
        self._seen: set[tuple[str, int, str]] = set()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if len(self._seen) >= MAX_MESSAGES:
                return
            message = record.getMessage()
            file, line = _caller(record)
            key = (file, line, message)
            if key in self._seen:
                return
            self._seen.add(key)
            ev: protocol.Event = {
                "kind": protocol.LIBRARY_LOG,
                "t": time.time(),
                "logger": protocol.clip(record.name, 200),
                "level": record.levelname,
                "message": protocol.clip(message, 2000),
                "file": file,
                "line": line,
            }
            self._put(ev)
        except Exception:
            pass  # the library's logging must go on regardless

    def handleError(self, record: logging.LogRecord) -> None:
        pass  # never print a logging traceback into the job's stderr


def _caller(record: logging.LogRecord) -> tuple[str, int]:
    """The line that called the logger, past warning_once and logging itself."""
    path = record.pathname or ""
    if not any(s in path for s in _SKIP):
        return path, record.lineno
    f: FrameType | None = sys._getframe(1)
    for _ in range(30):
        if f is None:
            break
        name = f.f_code.co_filename
        if not any(s in name for s in _SKIP) and not name.endswith("library_log.py"):
            return name, f.f_lineno
        f = f.f_back
    return path, record.lineno


def attach(put: Callable[[protocol.Event], object]) -> LibraryLog:
    handler = LibraryLog(put)
    logging.getLogger(LOGGER).addHandler(handler)
    return handler
