"""The standard-library side of ctmon's events: what the agent in the job uses.

An event is a JSON object on one line (UTF-8, ``\\n``-terminated) with at least
``kind`` (str) and ``t`` (float, Unix seconds). A recording is the stream of
events in a file; live viewers read the very same lines from a socket. See
docs/PROTOCOL.md for every kind and field; ctmon/wire/events.py is their typed
definition, and ctmon/wire/decode.py turns lines into those types wherever a
viewer-side process reads them.

This module holds what must not need msgspec (it is imported inside the
user's job, whose start-up it must not slow): the protocol's constants, the
kind names, ``encode``, the line splitter, and ``decode`` for the small
control lines a viewer sends the supervisor.

Compatibility rules, which every reader here follows:

* unknown kinds and unknown fields are ignored (a newer writer may add them);
* a line that is not a JSON object with a string ``kind`` is skipped and counted;
* the first line of a recording is a ``session`` event carrying ``v``, the
  protocol version; a reader shows what it understands of a newer version and
  says so, rather than refusing.

No pickle or eval anywhere: these bytes may come from a file or a socket that
someone else wrote.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

PROTOCOL_VERSION = 1

#: Longest line a reader accepts; longer lines are skipped (and counted), never
#: buffered without bound. Writers keep well under it: free text is clipped to
#: MAX_TEXT characters and output is sent in chunks of at most 16 KiB.
MAX_LINE_BYTES = 1 << 20
MAX_TEXT = 64 * 1024
#: Deepest nesting of lists and objects an event may have. Real events are a
#: few levels deep; a deeper one is refused where bytes enter, so no encoder,
#: store or renderer downstream can hit Python's recursion limit on it.
MAX_DEPTH = 32
#: A viewer's ``stop`` control: SIGTERM, then SIGKILL this long after if the
#: job still runs (a job that checkpoints on SIGTERM gets this much time).
DEFAULT_STOP_GRACE_S = 30.0

# Event kinds. Writers: S = supervisor (the process that launched the job and
# writes the recording), A = agent (inside the job).
SESSION = "session"  # S: first line; v, ctmon version, command, host, ids
PROCESS = "process"  # A: hello from the job process (pid, argv, python)
TORCH = "torch"  # A: torch/triton versions, recompile limit, cache dir
DEVICES = "devices"  # A: CUDA devices, once CUDA is initialised by the job
COMPILE_CALL = "compile_call"  # A: the job called torch.compile (what, where, with which options)
COMPILE_START = "compile_start"  # A: Dynamo starts compiling a frame
COMPILE = "compile"  # A: a frame compile attempt finished (compilation_metrics)
BWD_COMPILE = "bwd_compile"  # A: a backward graph was compiled
COMPILE_PHASE = "compile_phase"  # A: a phase of a compile began or ended (PyTorch's own timers)
HOTNESS = "hotness"  # A: where the main thread was, sampled: in compiled graphs, their eager glue, elsewhere
RECOMPILE_REASONS = "recompile_reasons"  # A: guard failures behind a recompile
GRAPH_BREAK = "graph_break"  # A: Dynamo split the graph
CACHE = "cache"  # A: FX graph / AOTAutograd cache hit, miss or bypass
AUTOTUNE = "autotune"  # A: Triton kernel autotuning result (GPU)
CUDAGRAPH = "cudagraph"  # A: a cudagraphs event (skip, re-record, ...)
CUDAGRAPH_TREE = "cudagraph_tree"  # A: a CUDA-graph warm-up or recording, or the trees' counts (reduce-overhead)
STEPS = "steps"  # A: a batch of step boundaries
DEVICE_TIME = "device_time"  # A: device-measured time across a span of steps
STEP_NUMBER = "step_number"  # A: the job's own number of a step (its optimizer's count, ctmon.step(n))
GENERATION = "generation"  # A: one generate() call: its prefill and decode calls, time to first token
SPECIALIZATION = "specialization"  # A: a dynamic dim Dynamo specialised to one value, at the user's line
LIBRARY_LOG = "library_log"  # A: a warning a library (transformers) logged, with the line that logged it
UNCAUGHT = "uncaught"  # A: the exception that ended the process, with the user's line
PROCESS_END = "process_end"  # S: a rank's agent connection closed (the process ended, or exec'd)
DROPS = "drops"  # A: cumulative counts of events the agent had to drop
NOTE = "note"  # A/S: a message from ctmon itself (hook disabled, ...)
OUTPUT = "output"  # S: a chunk of the job's stdout or stderr
SAMPLE = "sample"  # S: process and GPU sample (about 1 Hz)
EXIT = "exit"  # S: the job ended (exit code or signal)

KNOWN_KINDS = frozenset(
    {
        SESSION,
        PROCESS,
        TORCH,
        DEVICES,
        COMPILE_CALL,
        COMPILE_START,
        COMPILE,
        BWD_COMPILE,
        COMPILE_PHASE,
        HOTNESS,
        RECOMPILE_REASONS,
        GRAPH_BREAK,
        CACHE,
        AUTOTUNE,
        CUDAGRAPH,
        CUDAGRAPH_TREE,
        STEPS,
        DEVICE_TIME,
        STEP_NUMBER,
        GENERATION,
        LIBRARY_LOG,
        SPECIALIZATION,
        UNCAUGHT,
        PROCESS_END,
        DROPS,
        NOTE,
        OUTPUT,
        SAMPLE,
        EXIT,
    }
)

# The compile phases of ``compile_phase`` events, in the order a compile goes
# through them (ctmon/agent/phases.py says which of PyTorch's timers each is).
COMPILE_PHASES = ("dynamo_tracing", "guards", "aot_autograd", "inductor", "code_gen", "autotune", "backward")

# Step sources, by precedence: an explicit ctmon.step() outranks optimizer
# steps, which outrank calls of a compiled callable at top level.
STEP_SOURCES = ("compiled_call", "optimizer", "api")
STEP_RANK = {name: rank for rank, name in enumerate(STEP_SOURCES)}

Event = dict[str, Any]

_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=str)


def encode(event: Event) -> bytes:
    """One event as a UTF-8 JSON line.

    Non-finite floats are not JSON; they are written as null rather than
    producing a line that strict readers reject. A lone surrogate (a file name
    whose bytes are not UTF-8, as Python decodes it) becomes U+FFFD: the line
    stays valid UTF-8, which readers require.
    """
    try:
        text = _encoder.encode(event)
    except ValueError:
        text = _encoder.encode(finite(event))
    try:
        return (text + "\n").encode("utf-8")
    except UnicodeEncodeError:
        return (LONE_SURROGATE.sub("\ufffd", text) + "\n").encode("utf-8")


LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def finite(value: Any) -> Any:
    """A copy with NaN and infinities replaced by None (strict JSON has neither)."""
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def decode(line: bytes | str) -> Event | None:
    """Parse one control line (a viewer's hello or control) into a dict; None
    if it is not a JSON object with a string ``kind`` (never raises). Events
    are decoded, typed, by ctmon/wire/decode.py."""
    if len(line) > MAX_LINE_BYTES:
        return None
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    if _may_be_deep(line) and too_deep(obj):
        return None
    kind = obj.get("kind")
    if not isinstance(kind, str):
        return None
    t = obj.get("t")
    if type(t) is not float or t != t or t in (_INF, -_INF):
        obj["t"] = _time(t)
    return obj


def _may_be_deep(line: bytes | str) -> bool:
    """A cheap pre-check: nesting deeper than MAX_DEPTH needs that many opening brackets."""
    if isinstance(line, str):
        return line.count("{") + line.count("[") > MAX_DEPTH
    return line.count(b"{") + line.count(b"[") > MAX_DEPTH


def too_deep(obj: Any, limit: int = MAX_DEPTH) -> bool:
    """True if lists/objects nest deeper than ``limit`` (iterative: never recurses)."""
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children: Iterable[Any] = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return False


def clip(text: Any, limit: int = MAX_TEXT) -> str | None:
    """Free text from PyTorch or the job, bounded for the wire."""
    if text is None:
        return None
    s = text if isinstance(text, str) else str(text)
    if len(s) <= limit:
        return s
    return s[: limit - 20] + f"… [{len(s) - limit + 20} chars cut]"


class LineSplitter:
    """Incremental splitter for a byte stream of JSON lines.

    Feed it chunks as they arrive; it yields complete lines and keeps the
    partial tail. A line longer than MAX_LINE_BYTES is dropped as it streams
    (only its count is kept), so a hostile or broken peer cannot make the
    reader buffer without bound.
    """

    def __init__(self, max_line: int = MAX_LINE_BYTES) -> None:
        self._buf = bytearray()
        self._max = max_line
        self._discarding = False
        self.oversized = 0

    def feed(self, chunk: bytes) -> list[bytes]:
        if not self._discarding and len(self._buf) + len(chunk) <= self._max:
            # No line can be over the limit when the tail and the chunk
            # together are not: split in C (the reader's hot path).
            parts = chunk.split(b"\n")
            tail = parts.pop()
            if parts and self._buf:
                parts[0] = bytes(self._buf) + parts[0]
                self._buf.clear()
            self._buf += tail
            return parts
        lines: list[bytes] = []
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            if nl < 0:
                rest = chunk[start:]
                if self._discarding:
                    return lines
                if len(self._buf) + len(rest) > self._max:
                    self._buf.clear()
                    self._discarding = True
                    self.oversized += 1
                else:
                    self._buf += rest
                return lines
            piece = chunk[start:nl]
            if self._discarding:
                self._discarding = False
            elif len(self._buf) + len(piece) > self._max:
                self._buf.clear()
                self.oversized += 1
            else:
                if self._buf:
                    self._buf += piece
                    lines.append(bytes(self._buf))
                    self._buf.clear()
                else:
                    lines.append(bytes(piece))
            start = nl + 1

    @property
    def pending(self) -> bytes:
        """The unterminated tail (a recording cut off mid-line ends here)."""
        return bytes(self._buf)


def _time(t: Any) -> float:
    if isinstance(t, bool) or not isinstance(t, (int, float)):
        return 0.0
    try:
        ft = float(t)
    except OverflowError:
        return 0.0
    return ft if ft == ft and ft not in (_INF, -_INF) else 0.0


_INF = float("inf")
