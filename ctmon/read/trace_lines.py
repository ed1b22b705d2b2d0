"""One TORCH_TRACE log file's lines, read as records: the glog header and
its JSON, the payload's tab-led lines, a batch at a time with the file
closed between batches; what cannot be a record is skipped and counted
(``TraceStats``). ctmon/read/torch_trace.py turns the records into events.

Memory is bounded by a fixed cap: a line or a kept record's payload longer
than MAX_LINE / MAX_PAYLOAD is discarded as it streams, never held whole."""

from __future__ import annotations

import functools
import json
import os
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from ctmon.agent.trace import KEEP_ARTIFACTS, KEEP_EVENTS
from ctmon.wire.errors import RecordingError
from ctmon.words.phrases import plural

# "V1125 14:59:22.546000 14840 torch/_dynamo/utils.py:2350] {...}"
# Numbers are bounded where they are matched: a pid of thousands of digits
# is no pid (and int() would refuse it).
GLOG = re.compile(r"^[VIWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{1,6}) +(\d{1,10}) [^\]]*\] (\{.*)$")
# A JSON escape of a UTF-16 surrogate: a lone one decodes to a str no
# terminal or file can encode; only records with one are checked for it.
SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
MAX_LINE = 16 << 20  # a longer line is discarded as it streams (a record's, or a line of its payload)
MAX_PAYLOAD = MAX_LINE  # one kept record's payload at most (the same cap): a record with more is skipped
READ_BATCH = 1 << 20  # each file is read this much at a time, then closed until its next turn
PROGRESS_STEP = 8 << 20  # how often a reader hears how far it is
MAX_ID = 1 << 31  # frame, compile and rank ids are counters: one past this is not one
IDS = ("frame_id", "frame_compile_id", "attempt", "compiled_autograd_id", "rank")

# why a record was skipped, as the note says it
NOT_RECORD = "not trace records"
CUT = "cut off or not JSON"
DEEP = "nested too deep"
NOT_TEXT = "not UTF-8 text"
LONG = f"longer than {MAX_LINE >> 20} MiB"
BAD_TIME = "with an impossible time"
BAD_SHAPE = "of a shape ctmon does not know"


@dataclass
class TraceStats:
    files: int = 0
    records: int = 0
    skipped: Counter[str] = field(default_factory=Counter)  # why -> how many records (or lines)
    bytes: int = 0
    total_bytes: int = 0
    warnings: list[str] = field(default_factory=list)
    # called now and then with (bytes read, bytes in all files): a large trace says how far it is
    progress: Callable[[int, int], None] | None = None
    next_report: int = PROGRESS_STEP

    def skip(self, why: str) -> None:
        self.skipped[why] += 1

    def note(self) -> str | None:
        """The one line on what was skipped, or None."""
        total = sum(self.skipped.values())
        if not total:
            return None
        why = ", ".join(f"{n} {what}" for what, n in self.skipped.most_common())
        return (
            f"{plural(total, 'record')} of the trace skipped: not records ctmon could read ({why}); "
            "the rest is reported"
        )


LINE_LIMIT = MAX_LINE + 1  # what one readline() may return: a line this long is over the cap


def read_past(f: BinaryIO) -> int:
    """Read the rest of an over-long line and drop it, MAX_LINE bytes at a
    time; how many bytes that was."""
    n = 0
    while more := f.readline(LINE_LIMIT):
        n += len(more)
        if more[-1] == 10:  # its newline
            break
    return n


def year_of(path: str) -> int:
    """glog dates carry no year: the file's own (its last write)."""
    try:
        return time.localtime(os.path.getmtime(path)).tm_year
    except (OSError, OverflowError, ValueError):  # no such file, or a time stamp no calendar has
        return time.localtime().tm_year


def glog_time(m: re.Match[str], year: int) -> float | None:
    """The glog time, or None for a date or time no clock shows."""
    base = clock(year, m.string[1:14])
    if base is None:
        return None
    frac = m.group(6)
    return base + int(frac) / 10 ** len(frac)


@functools.lru_cache(maxsize=1024)
def clock(year: int, stamp: str) -> float | None:
    """``MMDD HH:MM:SS`` of ``year`` as a time, once per second of the trace
    (a record's time is asked for on every record)."""
    mon, day, hh, mm, ss = int(stamp[0:2]), int(stamp[2:4]), int(stamp[5:7]), int(stamp[8:10]), int(stamp[11:13])
    if not (1 <= mon <= 12 and 1 <= day <= 31 and hh < 24 and mm < 60 and ss < 61):
        return None
    try:
        return time.mktime((year, mon, day, hh, mm, ss, 0, 0, -1))
    except (OverflowError, ValueError):
        return None


def kept_name(md: dict[str, Any]) -> str | None:
    """The name under which a record becomes events, or None when ctmon
    does not take it (what the live agent takes: ctmon/agent/trace.py)."""
    name = next(iter(md))
    if name == "artifact":
        art = md.get("artifact")
        aname = art.get("name") if isinstance(art, dict) else None
        return aname if isinstance(aname, str) and aname in KEEP_ARTIFACTS else None
    if name == "chromium_event" or name in KEEP_EVENTS:
        return str(name)
    return None


def ids_ok(md: dict[str, Any]) -> bool:
    """Every id the record carries is a counter's value."""
    for k in IDS:
        v = md.get(k)
        if v is not None and (type(v) is not int or not 0 <= v < MAX_ID):
            return False
    val = md.get("str")  # the interned-string table: [text, index] (another shape is ignored, as live)
    if isinstance(val, list) and len(val) == 2 and not (type(val[1]) is int and 0 <= val[1] < MAX_ID):
        return False
    return True


@dataclass
class Record:
    """A kept record as it is read: its header, and its payload's lines."""

    t: float
    pid: int
    md: dict[str, Any]
    name: str
    lines: list[bytes] = field(default_factory=list)
    size: int = 0
    too_long: bool = False

    def add(self, raw: bytes) -> None:
        """One more line of the payload (a payload over MAX_PAYLOAD is dropped as it grows)."""
        if self.too_long:
            return
        self.size += len(raw)
        if self.size > MAX_PAYLOAD:
            self.drop()
        else:
            self.lines.append(raw)

    def drop(self) -> None:
        self.too_long = True
        self.lines = []  # what was kept of it goes now, not when the record ends

    def payload(self) -> str | None:
        """The payload's text (UnicodeDecodeError when it is not UTF-8)."""
        if not self.lines:
            return None
        return b"\n".join(ln[1:-1] if ln[-1:] == b"\n" else ln[1:] for ln in self.lines).decode("utf-8")


def header(raw: bytes, year: int, stats: TraceStats) -> Record | None:
    """A kept record's header, or None (a record ctmon does not take, or a
    line skipped and counted)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        stats.skip(NOT_TEXT)
        return None
    m = GLOG.match(text.rstrip("\n"))
    if m is None:
        stats.skip(NOT_RECORD)
        return None
    try:
        md = json.loads(m.group(8))
    except RecursionError:
        stats.skip(DEEP)
        return None
    except ValueError:  # not JSON, cut off, or a number of more digits than int() takes
        stats.skip(CUT)
        return None
    if not isinstance(md, dict) or not md:
        stats.skip(BAD_SHAPE)
        return None
    stats.records += 1
    name = kept_name(md)
    if name is None:
        return None
    t = glog_time(m, year)
    if t is None:
        stats.skip(BAD_TIME)
        return None
    if not ids_ok(md):
        stats.skip(BAD_SHAPE)
        return None
    why = unfit(text, md)
    if why is not None:
        stats.skip(why)
        return None
    return Record(t, int(m.group(7)), md, name)


def unfit(text: str, md: dict[str, Any]) -> str | None:
    """NOT_TEXT for metadata holding a lone surrogate (no text any output
    can encode), else None. Looked into only where its JSON text has one."""
    if "\\u" in text and SURROGATE.search(text):
        try:
            json.dumps(md, ensure_ascii=False).encode("utf-8")
        except (UnicodeEncodeError, ValueError, RecursionError):
            return NOT_TEXT
    return None


@dataclass
class Cursor:
    """Where the reading of one file stands between its batches."""

    offset: int = 0
    done: bool = False


def read_batch(path: str, cur: Cursor, stats: TraceStats, year: int) -> list[Record]:
    """The kept records of the file's next READ_BATCH bytes or so (a batch
    ends where a record begins); the file is closed again before this returns."""
    try:
        with open(path, "rb") as f:
            return read_records(f, cur, stats, year)
    except OSError as e:  # gone, unreadable, an I/O error half-way
        raise RecordingError(f"cannot read {path}: {e.strerror or e}") from None


def read_records(f: BinaryIO, cur: Cursor, stats: TraceStats, year: int) -> list[Record]:
    """``read_batch`` on the open file."""
    out: list[Record] = []
    read = 0  # bytes of this batch (added to the stats once: this loop is every line's)
    f.seek(cur.offset)
    readline = f.readline
    rec: Record | None = None
    while raw := readline(LINE_LIMIT):
        n = len(raw)
        whole = n < LINE_LIMIT or raw[-1] == 10
        if not whole:  # over MAX_LINE: the rest is read past, never held
            n += read_past(f)
        read += n
        if raw[0] == 9:  # a tab: a line of the record's payload
            if rec is not None and whole:
                rec.add(raw)
            elif rec is not None:
                rec.drop()
            continue
        if rec is not None:
            finish(rec, out, stats)
            rec = None
        if not whole:
            stats.skip(LONG)
            continue
        if read - n >= READ_BATCH:  # the next batch's first record: read again then
            cur.offset = f.tell() - n
            stats.bytes += read - n
            return out
        if stats.progress is not None and stats.bytes + read >= stats.next_report:
            stats.next_report = stats.bytes + read + PROGRESS_STEP
            stats.progress(stats.bytes + read, stats.total_bytes)
        rec = header(raw, year, stats)
    if rec is not None:
        finish(rec, out, stats)
    stats.bytes += read
    cur.done = True
    return out


def finish(rec: Record, out: list[Record], stats: TraceStats) -> None:
    if rec.too_long:
        stats.skip(LONG)
    else:
        out.append(rec)
