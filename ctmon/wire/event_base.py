"""What every event kind is built on (``Event``, ``Ranked``, the checked number
types) and ``Unknown``, the line of a kind this version does not know.

The kinds, typed, are the one definition of what travels and is recorded:
ctmon/wire/events_compile.py (compiling) and ctmon/wire/events.py (the run,
steps, messages and system, and ``AnyEvent``, the union the decoder reads).

Each kind is a ``msgspec.Struct`` tagged by its ``kind`` field, so one C-speed
decode both parses a line and checks it: a field of the wrong type makes the
whole event invalid where the bytes enter the process (ctmon/wire/decode.py),
and everything past that point reads attributes it can trust. docs/PROTOCOL.md
says what each field means; this module says what type it has.

Compatibility (protocol 1): unknown fields are ignored, a field a writer left
out takes its default, and a kind this version does not know is skipped by the
decoder, never an error. Defaults are immutable or copied per instance
(msgspec copies ``[]`` and ``{}`` defaults), and ``omit_defaults`` keeps
encoded lines as short as the dicts they replace.

The agent inside the job imports none of these modules: msgspec would add
~30 ms to every job's start-up (its hello is sent before user code runs), for
events it sends a few dozen times per compile. It writes plain JSON with the
standard library, and tests/test_wire_events.py decodes everything a real
agent sends with these types, so the two cannot drift apart.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

#: A float that is a number: JSON has no NaN or infinity, and an event built
#: in memory must not smuggle one in (a report is strict JSON; sums stay finite).
Finite = Annotated[float, msgspec.Meta(ge=-1.7976931348623157e308, le=1.7976931348623157e308)]
#: Nanoseconds between two step boundaries: never negative, and below ~146
#: years (checked here, at C speed, instead of for each of 10M boundaries a day).
Nanos = Annotated[int, msgspec.Meta(ge=0, lt=1 << 62)]


class Event(msgspec.Struct, tag_field="kind", kw_only=True, omit_defaults=True, gc=False):
    """Fields every event has. ``t``: when it happened (Unix seconds).

    Encoded, an event leaves out fields at their defaults (most are "not
    known"); the kinds the supervisor writes by the thousand, and whose every
    field docs/PROTOCOL.md promises, write all of theirs
    (``omit_defaults=False``)."""

    t: Finite = 0.0


class Ranked(Event):
    """Kinds a process of the job sends (and its step batches): ``rank`` says
    which rank of a distributed job, null outside one. A rank's agent stamps
    every event it sends; PyTorch's own trace records carry it too once the
    process group is up."""

    rank: int | None = None


class Unknown(msgspec.Struct, gc=False):
    """A line of a kind this version does not know (a newer writer's): not an
    event to fold, but the store counts them by kind."""

    kind: str
    t: Finite = 0.0
