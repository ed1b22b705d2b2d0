"""``ctmon export``: a run as a timeline for Perfetto / chrome://tracing.

    ctmon export --perfetto RUN [RUN ...] -o run.json   Chrome trace-event JSON
    ctmon export --svg RUN [RUN ...] -o run.svg         the same timeline, drawn

RUN: a recording, several recordings of one job's nodes, or PyTorch's own
TORCH_TRACE directory (or its logs). Open the JSON at https://ui.perfetto.dev
(Open trace file) or in chrome://tracing: one process per rank, tracks for
steps, compiles (phases nested) and events (graph breaks, cache results),
and counters for CPU, RSS and each GPU's utilisation and memory.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ctmon.cli import CliError
from ctmon.wire.errors import RecordingError

if TYPE_CHECKING:
    from ctmon.wire.event_base import Event, Unknown

USAGE = "ctmon export --perfetto|--svg RUN [RUN ...] -o FILE"
HELP = f"usage: {USAGE}\n\n" + (__doc__.split("\n\n", 1)[1] if __doc__ else "")


def main(argv: list[str]) -> int:
    fmt = out = None
    paths: list[str] = []
    it = iter(argv)
    for a in it:
        if a in ("-h", "--help"):
            sys.stdout.write(HELP)
            return 0
        if a in ("--perfetto", "--svg"):
            fmt = a[2:]
        elif a in ("-o", "--output") or a.startswith("--output="):
            out = a.partition("=")[2] if "=" in a else next(it, None)
            if not out:
                raise CliError("export: -o needs a FILE")
        elif a.startswith("-"):
            raise CliError(f"export: unknown option {a} (try: ctmon export --help)")
        else:
            paths.append(a)
    if fmt is None:
        raise CliError(f"export: say which format: --perfetto or --svg ({USAGE})")
    if not paths:
        raise CliError(f"export: a recording or TORCH_TRACE directory is required ({USAGE})")
    if out is None:
        raise CliError(f"export: -o FILE is required ({USAGE})")
    from ctmon.cli.outfile import refuse_overwrite, write_text
    from ctmon.read.merge import load_nodes
    from ctmon.read.torch_trace import is_torch_trace
    from ctmon.report.perfetto import export

    refuse_overwrite("export", out, _inputs(paths))
    if not is_torch_trace(paths[0]):
        load_nodes(paths)  # one line when a recording cannot be read (or several are not one job)
    # a trace is checked as it is read (ctmon/read/torch_trace.py), before anything is written
    timeline = export(_events(paths))
    if fmt == "perfetto":
        write_text("export", out, lambda f: json.dump(timeline, f, separators=(",", ":"), allow_nan=False))
    else:
        from ctmon.report.timeline_svg import draw

        svg = draw(timeline)
        write_text("export", out, lambda f: f.write(svg))
    n = sum(1 for e in timeline["traceEvents"] if e["ph"] != "M")
    sys.stderr.write(f"ctmon: wrote {out} ({n} events)\n")
    return 0


def _inputs(paths: list[str]) -> list[str]:
    """Every file the export reads: the recordings named, or the log files
    of a TORCH_TRACE directory."""
    from ctmon.read.torch_trace import is_torch_trace, trace_files

    if not is_torch_trace(paths[0]):
        return paths
    try:
        return paths + trace_files(paths)
    except (OSError, RecordingError):
        return paths  # reading them says what is wrong, in one line


def _events(paths: list[str]) -> Iterator[Event | Unknown | tuple[Event | Unknown, int | None]]:
    from ctmon.read.feeds import NodesFeed
    from ctmon.read.recording import read_recording
    from ctmon.read.torch_trace import is_torch_trace, trace_events
    from ctmon.read.trace_lines import TraceStats
    from ctmon.wire.decode import typed

    if is_torch_trace(paths[0]):
        for d in trace_events(paths, TraceStats()):
            ev = typed(d)
            if ev is not None:
                yield ev, d.get("origin")
    elif len(paths) > 1:
        for batch in NodesFeed(paths).batches():
            yield from batch
    else:
        yield from read_recording(paths[0])
