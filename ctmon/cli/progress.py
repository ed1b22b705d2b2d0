"""How far reading a large input is, on stderr (a PyTorch trace of hundreds
of MB takes a while): on a terminal one line rewritten in place, elsewhere a
line at each quarter. Small inputs say nothing."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

QUIET_BELOW = 64 << 20  # bytes: read in a few seconds, no need to say


def reading(what: str) -> Callable[[int, int], None]:
    tty = sys.stderr.isatty()
    state = {"last": 0.0, "quarter": 0}

    def show(done: int, total: int) -> None:
        if total < QUIET_BELOW:
            return
        pct = min(100, done * 100 // max(1, total))
        text = f"ctmon: reading {what}: {pct}% ({done >> 20} of {total >> 20} MB)"
        if tty:
            now = time.monotonic()
            if now - state["last"] >= 0.5 or pct == 100:
                state["last"] = now
                sys.stderr.write("\r" + text + ("\n" if pct == 100 else ""))
                sys.stderr.flush()
        elif pct // 25 > state["quarter"]:
            state["quarter"] = pct // 25
            sys.stderr.write(text + "\n")

    return show
