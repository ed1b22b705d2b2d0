"""``ctmon replay FILE``: the live TUI on a recording, at its end state, with
keys to step and play through time."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from ctmon.cli import CliError
from ctmon.launch.spec import UsageError

if TYPE_CHECKING:
    from ctmon.cli.diff import Baseline
    from ctmon.read.feeds import Feed, ListFeed
    from ctmon.tui.app import CtmonApp

USAGE = "ctmon replay FILE [FILE ...]"
HELP = f"""usage: {USAGE} [--baseline BASE [--any-job]]

Open the TUI on a recording (made by 'ctmon record' or 'ctmon attach').
It opens at the end of the run; [ and ] step between compiles and graph
breaks, {{ and }} jump by 10% of the run, p plays it back, ? lists the keys.

FILE may be PyTorch's own trace (a TORCH_TRACE directory, or its logs): the
same screen, without what a trace cannot hold (steps, samples, output).

Several files: the recordings of one distributed job's nodes (each node's
'ctmon record -- torchrun ...'), shown as one job with every node's ranks
(r: the ranks view). Recordings of different jobs are refused.

options:
  --baseline BASE            mark each finding new since BASE, an earlier run of the job
                             (a recording or TORCH_TRACE dir; as 'ctmon diff BASE FILE' finds it)
  --any-job                  with --baseline: compare with a run of another script too
  -h, --help                 show this help and exit
"""


def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        sys.stdout.write(HELP)
        return 0
    files, baseline, any_job = _baseline_args(argv)
    if not files:
        raise UsageError(f"replay: a recording is required ({USAGE})")
    bad = [f for f in files if f.startswith("-")]
    if bad:
        raise UsageError(f"replay: unexpected argument {bad[0]} ({USAGE})")
    path = files[0]
    from ctmon.read.feeds import NodesFeed, RecordingFeed
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
    try:
        # read before the screen opens: a bad BASE, or another script's run, is one line
        base = _read_baseline(baseline, any_job, path)
    except CliError:
        feed.close()
        raise
    if not (sys.stdout.isatty() and sys.stdin.isatty()):
        feed.close()
        raise CliError(f"replay: needs a terminal (for text: ctmon report {' '.join(files)})")
    from ctmon.cli.tui import run_app

    run_app(replay_app(feed, base))
    return 0


def replay_app(feed: Feed, base: Baseline | None = None) -> CtmonApp:
    """The screen on a recording; with BASE, its findings new since BASE marked."""
    from ctmon.cli.diff import since_base
    from ctmon.tui.app import CtmonApp

    app = CtmonApp(feed, replay=True, title=feed.name)
    app.ctx.since = since_base(base) if base is not None else None
    return app


def _baseline_args(argv: list[str]) -> tuple[list[str], str | None, bool]:
    """The files, ``--baseline BASE`` and ``--any-job`` of the arguments."""
    files: list[str] = []
    baseline: str | None = None
    any_job = False
    it = iter(argv)
    for a in it:
        if a == "--baseline" or a.startswith("--baseline="):
            baseline = a.partition("=")[2] if "=" in a else next(it, None)
            if not baseline:
                raise UsageError("replay: --baseline needs a recording or TORCH_TRACE directory")
        elif a == "--any-job":
            any_job = True
        elif a != "--":
            files.append(a)
    return files, baseline, any_job


def _read_baseline(baseline: str | None, any_job: bool, path: str) -> Baseline | None:
    from ctmon.cli.diff import live_baseline

    return live_baseline("replay", baseline, any_job, _command_of(path))


def _command_of(path: str) -> list[str] | None:
    """The command a recording's run ran (None: it does not say, as a TORCH_TRACE)."""
    from ctmon.read.recording import RecordingError, StreamDecoder, open_recording

    try:
        with open_recording(path) as f:
            for e in StreamDecoder().feed(f.read(1 << 16)):
                command = getattr(e, "command", None)
                if isinstance(command, list):
                    return [str(c) for c in command]
    except (OSError, RecordingError):
        pass
    return None


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
