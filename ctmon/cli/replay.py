"""``ctmon replay FILE``: the live TUI on a recording, at its end state, with
keys to step and play through time."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from ctmon.cli import CliError
from ctmon.launch.spec import UsageError

if TYPE_CHECKING:
    from ctmon.read.feeds import ListFeed

USAGE = "ctmon replay FILE [FILE ...]"
HELP = f"""usage: {USAGE}

Open the TUI on a recording (made by 'ctmon record' or 'ctmon attach').
It opens at the end of the run; [ and ] step between compiles and graph
breaks, {{ and }} jump by 10% of the run, p plays it back, ? lists the keys.

FILE may be PyTorch's own trace (a TORCH_TRACE directory, or its logs): the
same screen, without what a trace cannot hold (steps, samples, output).

Several files: the recordings of one distributed job's nodes (each node's
'ctmon record -- torchrun ...'), shown as one job with every node's ranks
(r: the ranks view). Recordings of different jobs are refused.

options:
  -h, --help                 show this help and exit
"""


def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        sys.stdout.write(HELP)
        return 0
    files = [a for a in argv if a != "--"]
    if not files:
        raise UsageError(f"replay: a recording is required ({USAGE})")
    bad = [f for f in files if f.startswith("-")]
    if bad:
        raise UsageError(f"replay: unexpected argument {bad[0]} ({USAGE})")
    path = files[0]
    from ctmon.read.feeds import Feed, NodesFeed, RecordingFeed
    from ctmon.read.torch_trace import is_torch_trace

    feed: Feed
    if any(is_torch_trace(f) for f in files):
        feed = _trace_feed(files)
    elif len(files) > 1:
        for f in files:
            _check_has_events(f)
        from ctmon.read.merge import load_nodes

        load_nodes(files)  # RecordingError: one line, when they are not the nodes of one job
        feed = NodesFeed(files)
    else:
        _check_has_events(path)
        feed = RecordingFeed(path)  # RecordingError: one line, from the CLI
    if not (sys.stdout.isatty() and sys.stdin.isatty()):
        feed.close()
        raise CliError(f"replay: needs a terminal (for text: ctmon report {' '.join(files)})")
    from ctmon.cli.tui import run_app
    from ctmon.tui.app import CtmonApp

    app = CtmonApp(feed, replay=True, title=feed.name)
    run_app(app)
    return 0


def _trace_feed(files: list[str]) -> ListFeed:
    """PyTorch's TORCH_TRACE logs, read as a recording (ctmon/read/torch_trace.py)."""
    from ctmon.read.feeds import ListFeed
    from ctmon.read.torch_trace import trace_events
    from ctmon.read.trace_lines import TraceStats

    # read once, here: RecordingError (one line) for no logs, a recording among them, nothing readable
    return ListFeed(list(trace_events(files, TraceStats())), name=os.path.basename(os.path.normpath(files[0])))


def _check_has_events(path: str) -> None:
    """Refuse, as `report` does, a file in which no line is an event."""
    from ctmon.read.recording import RecordingError, StreamDecoder, open_recording

    with open_recording(path) as f:
        dec = StreamDecoder()
        while chunk := f.read(1 << 16):
            if dec.feed(chunk):
                return
        if dec.finish():
            return
    raise RecordingError(f"{path} is not a ctmon recording (no events in it)")
