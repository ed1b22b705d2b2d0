"""Step boundaries relayed on the agent's socket where no shared ring could be made."""

from __future__ import annotations

import time

from ctmon.wire import protocol
from ctmon.wire.ring import RingReader, StepDecoder, StepRing

_now = time.perf_counter_ns


class StepRelay:
    """Boundaries sent on the agent's socket, where no ring file could be
    made (a full or size-limited runtime directory: the agent's note says so).

    The clock writes into a ring in the job's own memory exactly as into a
    shared one (StepRing.private: the hot path is the same), and at each
    flush the sender thread turns the new slots into ``steps`` events, as the
    supervisor does with a shared ring (launch/intake.py). Boundaries the
    thread did not read in time (a ring's worth while the socket was blocked)
    are counted in a ``drops`` event of its own. A job killed by SIGKILL or
    ``os._exit`` loses those since the last flush (a quarter to half a
    second), which a shared ring would have kept."""

    def __init__(self, ring: StepRing) -> None:
        self.reader = RingReader(ring)
        self.decoder = StepDecoder()
        self.lost = 0  # boundaries lost so far (the drops event's count)

    def drain(self) -> list[protocol.Event]:
        """The boundaries written since the last call, as events (sender thread)."""
        reader = self.reader
        values, lost = reader.read()
        if not values and not lost:
            return []
        now_wall, now_ns = time.time(), _now()
        events = self.decoder.decode(values, lost, now_wall, now_ns, reader.start, reader.source(), reader.anchor())
        if lost:
            self.lost += self.decoder.lost_steps
            events.append({"kind": protocol.DROPS, "t": now_wall, "steps": self.lost})
        return events
