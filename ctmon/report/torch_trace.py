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

Each file is streamed (memory bounded by one record's payload); a line that
is not a record, a record whose JSON is cut off, or a kind this version does
not know is skipped and counted.
"""

from __future__ import annotations

import heapq
import json
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ctmon.agent.phases import phase_of
from ctmon.agent.trace import KEEP_ARTIFACTS, KEEP_EVENTS
from ctmon.agent.trace_convert import TraceConverter
from ctmon.wire import protocol
from ctmon.wire.errors import RecordingError

# "V1125 14:59:22.546000 14840 torch/_dynamo/utils.py:2350] {...}"
_GLOG = re.compile(r"^[VIWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{1,6}) +(\d+) [^\]]*\] (\{.*)$")
_RANK_NAME = re.compile(r"_rank_(\d+)_")
TRACE_PREFIX = "dedicated_log_torch_trace"
_RANK_FIELD = re.compile(r'"rank": (\d+)[,}]')
RANK_SCAN = 64 << 20  # how far into a file without a rank in its name to look for one
MAX_PAYLOAD = 64 << 20
PROGRESS_STEP = (
    8 << 20
)  # how often a reader hears how far it is  # one record's payload kept at most (a huge generated-code artifact is skipped)


@dataclass
class TraceStats:
    files: int = 0
    records: int = 0
    skipped_lines: int = 0
    bad_records: int = 0
    bytes: int = 0
    total_bytes: int = 0
    warnings: list[str] = field(default_factory=list)
    # called now and then with (bytes read, bytes in all files): a large trace says how far it is
    progress: Callable[[int, int], None] | None = None


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
    return _GLOG.match(head.decode("utf-8", "replace").rstrip("\n")) is not None


def trace_files(paths: list[str]) -> list[str]:
    """The log files named, and those inside each directory named."""
    out: list[str] = []
    for p in paths:
        if os.path.isdir(p):
            found = sorted(
                os.path.join(p, n) for n in os.listdir(p) if n.endswith(".log") and os.path.isfile(os.path.join(p, n))
            )
            if not found:
                raise RecordingError(
                    f"{p} is a directory, not a recording (nor PyTorch's trace: no TORCH_TRACE *.log files in it)"
                )
            out += found
        else:
            out.append(p)
    return out


def trace_events(paths: list[str], stats: TraceStats) -> Iterator[dict[str, Any]]:
    """The events of one traced job: a session header, a ``process`` per
    file (with its rank where the file has one), every record the agent
    would have sent, in time order across files, and an exit of unknown
    status at the end. A ``RecordingError`` (one line) when a path is not a
    trace, or nothing in them is a trace record -- raised as it is found, so
    a reader never needs a first pass of its own."""
    if not all(is_torch_trace(p) for p in paths):
        raise RecordingError("a PyTorch trace and a ctmon recording cannot be reported together")
    files = trace_files(paths)
    stats.files = len(files)
    stats.total_bytes = sum(_size(f) for f in files)
    ranks = {f: _rank_of(f) for f in files}
    ranked = [r for r in ranks.values() if r is not None]
    world = len(ranked) if ranked and len(ranked) == len(files) else None
    first_t = [_first_time(f) for f in files]
    start = min((t for t in first_t if t is not None), default=time.time())
    yield {
        "kind": protocol.SESSION,
        "t": start,
        "v": protocol.PROTOCOL_VERSION,
        "id": os.path.basename(os.path.normpath(paths[0])),
        "mode": "torch_trace",
        "command": ["TORCH_TRACE", *[os.path.abspath(p) for p in paths]],
        "synthetic": "torch_trace",
    }
    # Several processes without a rank (separate runs in one directory, a
    # job's helper processes): each event says which one it came from, for
    # readers that draw processes apart (the timeline export).
    apart = sum(1 for f in files if ranks[f] is None) > 1
    streams = [_file_events(f, ranks[f], world if ranks[f] is not None else None, stats, apart) for f in files]
    last = start
    for ev in heapq.merge(*streams, key=lambda e: e["t"]):
        last = max(last, ev["t"])
        yield ev
    if not stats.records:
        raise RecordingError(f"{paths[0]}: no PyTorch trace records in it")
    yield {"kind": protocol.EXIT, "t": last, "code": None, "signal": None}


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _rank_of(path: str) -> int | None:
    """The rank in the file's name, else the first one its records carry (a
    process whose trace began before its process group: mp.spawn's ranks);
    only the first RANK_SCAN bytes are looked at."""
    m = _RANK_NAME.search(os.path.basename(path))
    if m:
        return int(m.group(1))
    try:
        with open(path, "rb") as f:
            seen = 0
            for raw in f:
                seen += len(raw)
                if seen > RANK_SCAN:
                    break
                if raw[:1] != b"\t" and b'"rank": ' in raw:
                    found = _RANK_FIELD.search(raw.decode("utf-8", "replace"))
                    if found:
                        return int(found.group(1))
    except OSError:
        return None
    return None


def _first_time(path: str) -> float | None:
    try:
        with open(path, "rb") as f:
            for raw in f:
                m = _GLOG.match(raw.decode("utf-8", "replace").rstrip("\n"))
                if m:
                    return _when(m, _year_of(path))
    except OSError:
        return None
    return None


def _year_of(path: str) -> int:
    """glog dates carry no year: the file's own (its last write)."""
    try:
        return time.localtime(os.path.getmtime(path)).tm_year
    except OSError:
        return time.localtime().tm_year


def _when(m: re.Match[str], year: int) -> float:
    mon, day, hh, mm, ss, frac = (m.group(i) for i in range(1, 7))
    try:
        base = time.mktime((year, int(mon), int(day), int(hh), int(mm), int(ss), 0, 0, -1))
    except (OverflowError, ValueError):
        return 0.0
    return base + int(frac) / 10 ** len(frac)


def _records(path: str, stats: TraceStats) -> Iterator[tuple[float, int, dict[str, Any], str | None]]:
    """(time, pid, metadata, payload) of each record in one log file."""
    year = _year_of(path)
    head: tuple[float, int, dict[str, Any]] | None = None
    payload: list[str] = []
    size = 0
    next_report = stats.bytes + PROGRESS_STEP
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below, also when the reader stops early
    except OSError as e:
        raise RecordingError(f"cannot read {path}: {e.strerror or e}") from None
    with f:
        for raw in f:
            stats.bytes += len(raw)
            if stats.progress is not None and stats.bytes >= next_report:
                next_report = stats.bytes + PROGRESS_STEP
                stats.progress(stats.bytes, stats.total_bytes)
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if line.startswith("\t"):
                if head is not None and size < MAX_PAYLOAD:
                    payload.append(line[1:])
                    size += len(line)
                continue
            if head is not None:
                yield (*head, "\n".join(payload) if payload else None)
            head, payload, size = None, [], 0
            m = _GLOG.match(line)
            if m is None:
                stats.skipped_lines += 1
                continue
            try:
                md = json.loads(m.group(8))
            except ValueError:
                stats.bad_records += 1
                continue
            if not isinstance(md, dict) or not md:
                stats.bad_records += 1
                continue
            stats.records += 1
            head = (_when(m, year), int(m.group(7)), md)
        if head is not None:
            yield (*head, "\n".join(payload) if payload else None)


def _file_events(
    path: str, rank: int | None, world: int | None, stats: TraceStats, apart: bool = False
) -> Iterator[dict[str, Any]]:
    """One file's events; ``apart``: each stamped with the file's process
    (``origin``: its pid) -- a key the event types do not hold, read only
    from the dicts."""
    conv = TraceConverter()
    origin: int | None = None
    for t, pid, md, payload in _records(path, stats):
        if origin is None:
            origin = pid
            hello: dict[str, Any] = {"kind": protocol.PROCESS, "t": t, "pid": pid}
            if rank is not None:
                hello.update(rank=rank, world_size=world)
            if apart:
                hello["origin"] = origin
            yield hello
        name: Any = next(iter(md))
        if name == "artifact":
            art = md.get("artifact")
            name = art.get("name") if isinstance(art, dict) else None
            if name not in KEEP_ARTIFACTS:
                continue
        elif name == "chromium_event":
            if payload is None or phase_of(payload) is None:
                continue
        elif name not in KEEP_EVENTS:
            continue
        if rank is not None:
            md = {**md, "rank": rank}  # the file's rank, also on records from before it was known
        try:
            events = conv.convert(str(name), t, md, payload)
        except Exception:  # a record of a shape this version does not know
            stats.bad_records += 1
            continue
        if apart:
            for ev in events:
                ev["origin"] = origin
        yield from events


def load_trace(paths: list[str], progress: Callable[[int, int], None] | None = None) -> tuple[Any, TraceStats]:
    """The store of a traced job (a ``RecordingError``, one line, when there
    is nothing to read)."""
    from ctmon.store import Session

    stats = TraceStats(progress=progress)
    s = Session()
    for ev in trace_events(paths, stats):
        s.apply(ev)
    if stats.skipped_lines or stats.bad_records:
        stats.warnings.append(
            f"{stats.skipped_lines + stats.bad_records} line(s) of the trace were not records ctmon could read "
            "(cut off, or from another tool); the rest is reported"
        )
    return s, stats
