"""Helpers for driving the app headless (tests, benchmarks, checks)."""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from typing import Any

from ctmon.read.feeds import Batch, Feed
from ctmon.wire.decode import typed
from ctmon.wire.event_base import Event, Unknown


class QueueFeed(Feed):
    """A live feed whose events the caller pushes; controls are recorded."""

    def __init__(self, live: bool = True) -> None:
        self.live = live
        self.name = "queue"
        self._q: queue.Queue[Batch | None] = queue.Queue()
        self.controls: list[str] = []
        self.graces: list[float | None] = []
        self.stdin: list[str] = []
        self.closed = False

    def push(self, events: list[Event | Unknown | dict[str, Any]]) -> None:
        """Events as a stream would bring them (dicts are validated on the way)."""
        self._q.put([ev for ev in map(typed, events) if ev is not None])

    def end(self) -> None:
        self._q.put(None)

    def batches(self) -> Iterator[Batch]:
        while True:
            batch = self._q.get()
            if batch is None or self.closed:
                return
            yield batch

    def control(self, action: str, grace: float | None = None) -> bool:
        self.controls.append(action)
        self.graces.append(grace)
        return True

    def send_stdin(self, data: str) -> bool:
        self.stdin.append(data)
        return True

    def close(self) -> None:
        self.closed = True
        self._q.put(None)


async def wait_until(pilot: Any, predicate: Any, timeout: float = 10.0, step: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            await pilot.pause()
            return True
        await pilot.pause(step)
    return bool(predicate())


async def wait_loaded(pilot: Any, timeout: float = 10.0) -> None:
    """Until the app has folded and drawn everything its (finite) feed sends."""
    app = pilot.app
    ok = await wait_until(pilot, lambda: app.loaded, timeout)
    if not ok:
        raise TimeoutError("the app did not finish loading its feed")
    await pilot.pause()


async def wait_applied(pilot: Any, count: int, timeout: float = 10.0) -> None:
    """Until at least ``count`` events are folded and a repaint has had its chance."""
    app = pilot.app
    ok = await wait_until(
        pilot, lambda: app.applied >= count and app.handoff.pending == 0 and app._refresh_timer is None, timeout
    )
    if not ok:
        raise TimeoutError(f"only {app.applied} of {count} events were applied")
    await pilot.pause()
