"""PyTorch's structured trace (``TORCH_TRACE=DIR``) read as a recording.

Jobs that ran with ``TORCH_TRACE`` and without ctmon leave a directory of
``dedicated_log_torch_trace_*.log`` files, one per process (``_rank_N_`` in
the name once the process knew its rank). Each record is a glog-style line
-- level and date, time, pid, source line -- then the record's JSON on the
same line; its payload follows on lines that start with a tab. The records
ctmon's agent takes live are taken here too and turned into events by the
agent's own converter, so a trace folds into the same store, findings and
report as a recording of the same run. What a trace does not hold (step
times, samples, output, the exit status) stays absent.

Each file is streamed, a batch of records at a time, and closed between
batches (any number of files, whatever the limit on open files). Memory is
bounded by a fixed cap: a line or a kept record's payload longer than
MAX_LINE / MAX_PAYLOAD is discarded as it streams, never held whole. A line
that is not a record, a record cut off, not UTF-8, nested too deep, with
ids or a time that cannot be, or of a shape this version does not know is
skipped and counted (one note); a kind this version does not know is
skipped.
"""

from __future__ import annotations

import heapq
import json
import math
import os
import re
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ctmon.agent.phases import phase_of
from ctmon.agent.trace_convert import TraceConverter
from ctmon.read.trace_lines import (
    BAD_SHAPE,
    BAD_TIME,
    DEEP,
    GLOG,
    LINE_LIMIT,
    NOT_TEXT,
    SURROGATE,
    Cursor,
    Record,
    TraceStats,
    glog_time,
    read_batch,
    read_past,
    year_of,
)
from ctmon.wire import protocol
from ctmon.wire.decode import from_dict
from ctmon.wire.errors import RecordingError
from ctmon.wire.event_base import Event

if TYPE_CHECKING:
    from ctmon.store import Session

# Numbers are bounded where they are matched: a rank of thousands of digits
# is no rank (and int() would refuse it).
_RANK_NAME = re.compile(r"_rank_(\d{1,9})_")
TRACE_PREFIX = "dedicated_log_torch_trace"
_RANK_FIELD = re.compile(r'"rank": (\d{1,9})[,}]')
MAX_INT = 1 << 63
RANK_SCAN = 64 << 20  # how far into a file to look for its first time and (without one in its name) its rank


def is_torch_trace(path: str) -> bool:
    """A TORCH_TRACE directory, or one of its log files (by its first line)."""
    if os.path.isdir(path):
        return True
    if not os.path.isfile(path):
        return False  # a FIFO, a device, nothing: never opened here (a FIFO would block)
    try:
        with open(path, "rb") as f:
            head = f.readline(4096)
    except OSError:
        return False
    return GLOG.match(head.decode("utf-8", "replace").rstrip("\n")) is not None


OUTPUT_LOG_SUFFIX = ".output.log"  # the job's output beside a ctmon recording (launch/runtime.py)


def _not_a_trace(path: str, recordings: list[str]) -> str:
    """What a directory without PyTorch's trace logs is, and what to name instead."""
    if not recordings:
        return f"{path} is a directory, not a recording (nor PyTorch's trace: no TORCH_TRACE *.log files in it)"
    from ctmon.words.modes import MODES

    what = "a directory of ctmon recordings"
    if any(n.split(".", 1)[0] in (*MODES, "try") for n in recordings):  # "try": bench --try's run
        what = "a 'ctmon bench' directory (one recording per run)"
        recordings = sorted(recordings, key=lambda n: n.split(".", 1)[0] != "default")  # the default mode's first
    shown = ", ".join(recordings[:6]) + (f", … {len(recordings) - 6} more" if len(recordings) > 6 else "")
    return (
        f"{path} is {what}, not one recording nor PyTorch's trace: "
        f"name one of its recordings, e.g. {os.path.join(path, recordings[0])} ({shown})"
    )


def trace_files(paths: list[str]) -> list[str]:
    """The log files named, and those inside each directory named."""
    out: list[str] = []
    for p in paths:
        if os.path.isdir(p):
            names = sorted(n for n in os.listdir(p) if os.path.isfile(os.path.join(p, n)))
            # X.output.log beside X.jsonl is a ctmon run's own output, never PyTorch's trace
            found = [os.path.join(p, n) for n in names if n.endswith(".log") and not n.endswith(OUTPUT_LOG_SUFFIX)]
            if not found:
                raise RecordingError(_not_a_trace(p, [n for n in names if n.endswith(".jsonl")]))
            out += found
        else:
            out.append(p)
    return out


def trace_events(paths: list[str], stats: TraceStats) -> Iterator[dict[str, Any]]:
    """The events of one traced job: a session header, a ``process`` per
    file (with its rank where the file has one), every record the agent
    would have sent, in time order across files, a note on what was skipped,
    and an exit of unknown status at the end. A ``RecordingError`` (one
    line) when a path is not a trace, or nothing in them is a trace record
    -- raised as it is found, so a reader never needs a first pass of its own."""
    for d, _ in _stream(paths, stats):
        yield d


Pair = tuple[dict[str, Any], Event]  # an event as a dict (with ``origin`` where set), and validated


def _stream(paths: list[str], stats: TraceStats) -> Iterator[Pair]:
    """``trace_events``, each also as the store takes it (validated once, here)."""
    if not all(is_torch_trace(p) for p in paths):
        raise RecordingError("a PyTorch trace and a ctmon recording cannot be reported together")
    files = trace_files(paths)
    stats.files = len(files)
    stats.total_bytes = sum(_size(f) for f in files)
    heads = {f: _scan_head(f) for f in files}  # one file open at a time
    ranks = {f: heads[f][0] for f in files}
    ranked = [r for r in ranks.values() if r is not None]
    world = len(ranked) if ranked and len(ranked) == len(files) else None
    start = min((t for _, t in heads.values() if t is not None), default=time.time())
    yield _own(
        {
            "kind": protocol.SESSION,
            "t": start,
            "v": protocol.PROTOCOL_VERSION,
            "id": os.path.basename(os.path.normpath(paths[0])),
            "mode": "torch_trace",
            "command": ["TORCH_TRACE", *paths],  # as the user named them, as a recording's command is
            "synthetic": "torch_trace",
        }
    )
    # Several processes without a rank (separate runs in one directory, a
    # job's helper processes): each event says which one it came from, for
    # readers that draw processes apart (the timeline export).
    apart = sum(1 for f in files if ranks[f] is None) > 1
    streams = [_file_events(f, ranks[f], world if ranks[f] is not None else None, stats, apart) for f in files]
    last = start
    for pair in heapq.merge(*streams, key=lambda p: p[0]["t"]):
        last = max(last, pair[0]["t"])
        yield pair
    if not stats.records:
        raise RecordingError(f"{paths[0]}: no PyTorch trace records in it")
    note = stats.note()
    if note is not None:  # in the store too: the report's notes and replay's log show it
        yield _own({"kind": protocol.NOTE, "t": last, "level": "warning", "source": "ctmon", "message": note})
    yield _own({"kind": protocol.EXIT, "t": last, "code": None, "signal": None})


def _own(d: dict[str, Any]) -> Pair:
    """An event ctmon makes itself (valid by construction: checked all the same)."""
    ev = from_dict(d)
    if ev is None:
        raise RecordingError(f"cannot read the trace: its {d['kind']} event would not be valid")
    return d, ev


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _scan_head(path: str) -> tuple[int | None, float | None]:
    """The file's rank and its first record's time. The rank is the one in
    its name, else the first one its records carry (a process whose trace
    began before its process group: mp.spawn's ranks); only the first
    RANK_SCAN bytes are looked at."""
    m = _RANK_NAME.search(os.path.basename(path))
    rank = int(m.group(1)) if m else None
    first: float | None = None
    year = year_of(path)
    seen = 0
    try:
        with open(path, "rb") as f:
            while seen <= RANK_SCAN and (first is None or rank is None):
                raw = f.readline(LINE_LIMIT)
                if not raw:
                    break
                seen += len(raw)
                if len(raw) == LINE_LIMIT and raw[-1] != 10:
                    seen += read_past(f)
                    continue
                if raw[0] == 9:  # a tab: a payload's line
                    continue
                text = raw.decode("utf-8", "replace")
                if first is None and (g := GLOG.match(text.rstrip("\n"))):
                    first = glog_time(g, year)
                if rank is None and '"rank": ' in text and (found := _RANK_FIELD.search(text)):
                    rank = int(found.group(1))
    except OSError:
        pass
    return rank, first


def _walk(obj: object) -> str | None:
    """DEEP or BAD_SHAPE for an event nested past MAX_DEPTH or holding an
    integer past 64 bits (a line number, a size), else None. Iterative: a
    deep value never recurses here."""
    todo: list[tuple[object, int]] = [(obj, 1)]
    while todo:
        value, depth = todo.pop()
        if type(value) is int and not -MAX_INT <= value < MAX_INT:
            return BAD_SHAPE
        if isinstance(value, dict | list):
            if depth > protocol.MAX_DEPTH:
                return DEEP
            todo.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return None


def _file_events(
    path: str, rank: int | None, world: int | None, stats: TraceStats, apart: bool = False
) -> Iterator[Pair]:
    """One file's events; ``apart``: each stamped with the file's process
    (``origin``: its pid) -- a key the event types do not hold, read only
    from the dicts."""
    conv = TraceConverter()
    origin: int | None = None
    year = year_of(path)
    cur = Cursor()
    while not cur.done:
        batch: list[Pair] = []
        for rec in read_batch(path, cur, stats, year):
            if origin is None:
                origin = rec.pid
                hello: dict[str, Any] = {"kind": protocol.PROCESS, "t": rec.t, "pid": rec.pid}
                if rank is not None:
                    hello.update(rank=rank, world_size=world)
                if apart:
                    hello["origin"] = origin
                batch.append(_own(hello))
            pairs = _convert(conv, rec, rank, stats)
            if apart:
                for d, _ in pairs:
                    d["origin"] = origin
            batch += pairs
        yield from batch  # the file is closed while its events wait their turn in the merge


def _convert(conv: TraceConverter, rec: Record, rank: int | None, stats: TraceStats) -> list[Pair]:
    """The events of one kept record, each also as the store takes it; a
    record that cannot give them is skipped and counted."""
    try:
        payload = rec.payload()
    except UnicodeDecodeError:
        stats.skip(NOT_TEXT)
        return []
    if rec.name == "chromium_event" and (payload is None or phase_of(payload) is None):
        return []  # a phase ctmon does not show
    md = {**rec.md, "rank": rank} if rank is not None else rec.md  # the file's rank, also before it was known
    try:
        events = conv.convert(rec.name, rec.t, md, payload)
    except Exception:  # a record of a shape this version does not know
        stats.skip(BAD_SHAPE)
        return []
    if payload is not None and SURROGATE.search(payload):
        try:
            json.dumps(events, ensure_ascii=False).encode("utf-8")
        except (UnicodeEncodeError, ValueError, RecursionError):  # a lone surrogate: no text
            stats.skip(NOT_TEXT)
            return []
    out: list[Pair] = []
    for d in events:
        t = d.get("t")
        # a phase's time is PyTorch's own timestamp: NaN or infinite is no time (and no JSON)
        if type(t) is not float or not math.isfinite(t):
            stats.skip(BAD_TIME)
            return []
        why = _walk(d)  # what the converter copied: nothing deeper or larger than an event holds
        if why is not None:
            stats.skip(why)
            return []
        ev = from_dict(d)
        if ev is None:  # a field of a type the store refuses: counted here, not lost unseen
            stats.skip(BAD_SHAPE)
            return []
        out.append((d, ev))
    return out


def load_trace(paths: list[str], progress: Callable[[int, int], None] | None = None) -> tuple[Session, TraceStats]:
    """The store of a traced job (a ``RecordingError``, one line, when there
    is nothing to read)."""
    from ctmon.store import Session

    stats = TraceStats(progress=progress)
    s = Session()
    for _, ev in _stream(paths, stats):
        s.apply(ev)
    note = stats.note()
    if note is not None:
        stats.warnings.append(note)
    return s, stats
