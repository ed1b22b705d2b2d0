"""The screen a user really has: 80x24 over ssh, two ranks, a failed job.

Each recording under tests/fixtures/recordings is a real run
(make_fixtures.py): ``warnings`` (three graph breaks in the step loop),
``two_ranks`` (a 2-rank gloo job under torchrun in which rank 1 recompiles),
``failed_syntax`` and ``failed_early`` (a syntax error; an exception in the
first step, inside the compiled model). The SVG snapshots of the same
screens are in test_tui_snapshots.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from typing import Any

import pytest

from ctmon.read.feeds import ListFeed, RecordingFeed
from ctmon.read.load import load
from ctmon.report.build import build_report
from ctmon.report.text import summary_lines
from ctmon.store import Session
from ctmon.store.output import OutputBuffer
from ctmon.tui.app import CtmonApp
from ctmon.tui.capture import screen_text
from ctmon.tui.context import ViewContext
from ctmon.tui.details import break_detail
from ctmon.tui.panels import findings_body
from ctmon.tui.ranks_screen import ranks_summary
from ctmon.tui.screens import DetailScreen
from ctmon.tui.stream_panes import OutputPane
from ctmon.tui.testing import wait_loaded

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "recordings")
WORKLOADS = os.path.join(ROOT, "tests", "workloads")
SMALL_SIZES = [(80, 24), (100, 30), (119, 35)]
ALL_SIZES = [*SMALL_SIZES, (160, 48)]


def fixture(name: str) -> str:
    return os.path.join(FIXTURES, f"{name}.jsonl")


async def _screen(app: CtmonApp, size: tuple[int, int], *keys: str) -> str:
    async with app.run_test(size=size) as pilot:
        await wait_loaded(pilot)
        for key in keys:
            await pilot.press(key)
            await pilot.pause()
        return screen_text(app)


def screen(name: str, size: tuple[int, int], *keys: str) -> str:
    return asyncio.run(_screen(CtmonApp(RecordingFeed(fixture(name)), replay=True), size, *keys))


def report_of(name: str) -> dict[str, Any]:
    session, _ = load(fixture(name))
    return build_report(session)


def session_of(name: str) -> Session:
    return load(fixture(name))[0]


# ---------------------------------------------- 1: warnings on the main screen


@pytest.mark.parametrize("size", ALL_SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_warnings_and_the_way_to_their_fixes_are_on_the_main_screen(size: tuple[int, int]) -> None:
    warnings = [f for f in report_of("warnings")["findings"] if f["severity"] == "warning"]
    assert len(warnings) == 3, [f["title"] for f in warnings]  # the workload's three graph breaks
    shown = screen("warnings", size)
    lines = shown.splitlines()
    listed = [f for f in warnings if "warn " + f["title"][:30] in shown]
    # the most severe first, as many as the strip holds, and the count of the rest
    assert listed and listed == warnings[: len(listed)], shown
    if len(listed) < len(warnings):
        assert f"+{len(warnings) - len(listed)} more a" in shown, shown
    assert "Findings · 3 warn" in shown and "· a" in shown, shown  # the key that opens them
    assert " a  findings " in lines[-1], lines[-1]  # and the key bar says it too


@pytest.mark.parametrize("size", SMALL_SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_a_small_screen_lists_warnings_not_only_critical_findings(size: tuple[int, int]) -> None:
    """The issue's screen: a run whose findings are all warnings showed none below 120x36."""
    shown = screen("no_gpu", size)
    assert "warn Graph breaks on logging / print in the step loop" in shown, shown


def test_a_opens_every_finding_with_its_fix() -> None:
    async def run() -> DetailScreen:
        app = CtmonApp(RecordingFeed(fixture("warnings")), replay=True)
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_loaded(pilot)
            await pilot.press("a")
            await pilot.pause()
            assert isinstance(app.screen, DetailScreen)
            return app.screen

    detail = asyncio.run(run())
    body = detail.body.plain
    for f in report_of("warnings")["findings"]:
        assert f["title"] in body
    assert body.count("fix: ") >= 3


# --------------------------------------------------------- 2: wrapped once


def _lines_at(doc: Any, width: int) -> list[str]:
    from rich.console import Console

    return [line.plain for line in doc.lines(width, Console(width=width))]


def test_findings_wrap_once_to_the_screen_and_under_their_label() -> None:
    ctx = ViewContext(session_of("warnings"))
    doc = findings_body(ctx)
    for width in (78, 120):
        lines = _lines_at(doc, width)
        assert all(len(line) <= width for line in lines)
        for line in lines:
            if line and not line.startswith(("WARNING", "CRITICAL", "INFO")):
                assert line.startswith("  "), (width, line)  # nothing wraps back to column 0
        fixes = [i for i, line in enumerate(lines) if line.startswith("  fix: ")]
        assert fixes
        for i in fixes:  # a fix's later lines sit under its first word
            follow = lines[i + 1] if i + 1 < len(lines) else ""
            assert not follow or follow.startswith("       ") or not follow.strip(), (width, lines[i : i + 2])
    # wrapped at the width it is drawn at, not at a fixed 100 columns: the
    # same paragraph takes fewer lines on a wider screen
    assert len(_lines_at(doc, 200)) < len(_lines_at(doc, 100)) < len(_lines_at(doc, 78))


def _break_events_with_source(tmp_path: Any, long_line: bool) -> tuple[list[dict[str, Any]], str]:
    """The no-GPU recording, its graph breaks' file a copy whose line 14 is long."""
    src = open(os.path.join(WORKLOADS, "graph_breaks.py")).read().splitlines()
    if long_line:
        src[13] += "  # " + "a comment that runs far past the edge of an eighty-column terminal " * 2
    path = os.path.join(str(tmp_path), "graph_breaks.py")
    with open(path, "w") as f:
        f.write("\n".join(src) + "\n")
    text = open(fixture("no_gpu")).read()
    text = text.replace("/home/alice/proj/graph_breaks.py", path).replace(
        '"/home/alice/proj"', json.dumps(str(tmp_path))
    )
    return [json.loads(line) for line in text.splitlines() if line.strip()], path


def test_graph_break_source_lines_are_cut_not_wrapped_to_column_0(tmp_path: Any) -> None:
    events, _ = _break_events_with_source(tmp_path, long_line=True)

    async def run() -> str:
        app = CtmonApp(ListFeed(events))
        async with app.run_test(size=(80, 40)) as pilot:
            await wait_loaded(pilot)
            await pilot.press("tab", "down", "enter")
            await pilot.pause()
            assert isinstance(app.screen, DetailScreen) and app.screen.name == "break-detail"
            return screen_text(app)

    shown = asyncio.run(run()).splitlines()
    at = next(i for i, line in enumerate(shown) if "▶ 14 │" in line)
    assert shown[at].rstrip(" │").endswith("…"), shown[at]
    assert "15 │" in shown[at + 1], shown[at + 1]  # the next source line, not the rest of this one


def test_the_break_detail_gives_pytorchs_explanation_and_hints_once() -> None:
    s = session_of("no_gpu")
    for site in s.compile.breaks.values():
        text = break_detail(site, ViewContext(s)).plain
        assert site.explanation and text.count(site.explanation) == 1, text
        for hint in site.hints:
            assert text.count(hint) == 1, (hint, text)
        assert "Developer debug context" in text  # what is not said elsewhere stays


# ----------------------------------------------------------- 3: whose figures


def _title(shown: str, name: str) -> str:
    # on a border (wide, or a small screen's pane), or the tab strip's current tab
    m = re.search(rf"(?:─ ?|^  ?)({name}\b[^─│╮┐\n]*?)(?= {{2,}}|[─│╮┐\n]| ?$)", shown, re.M)
    assert m, (name, shown)
    return m.group(1).strip()


@pytest.mark.parametrize("size", [(80, 24), (100, 30), (160, 48)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_two_ranks_every_pane_names_its_scope_and_totals_agree(size: tuple[int, int]) -> None:
    rep = report_of("two_ranks")
    c = rep["compile"]
    ranks = rep["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1] and ranks[1]["compile"]["recompiles"] == 1
    shown = screen("two_ranks", size)
    # the Compilation pane: every rank's totals, as the report and the summary say them
    assert "Compilation · all 2 ranks summed" in shown, shown
    totals = f"{c['compiles']} compiles · {c['recompiles']} recompile{'s' if c['recompiles'] != 1 else ''} · "
    assert totals in shown, shown
    summary = "\n".join(summary_lines(rep))
    assert f"{c['compiles']} compiles, {c['recompiles']} recompile" in summary
    assert f"{c['total_time_s']:.2f} s compiling" in shown and f"{c['total_time_s']:.2f} s compiling" in summary
    # each rank's own counts beside them, summing to the totals
    assert "by rank: r0 1 compile · r1 2 compiles, 1 recompile" in shown, shown
    assert sum(r["compile"]["compiles"] for r in ranks) == c["compiles"]
    # the panes that follow one process say which; the job-wide ones say so
    for name in ("Steps", "Frames"):
        assert _title(shown, name).endswith("rank 0"), _title(shown, name)
    for name in ("GPU", "Process"):
        assert _title(shown, name).endswith("all ranks"), _title(shown, name)
    assert "2 ranks" in shown and "2 rankss" not in shown
    steps = rep["steps"]["count"]
    assert f"Steps · {steps} (optimizer)" in shown and not re.search(r"\bstep \d", shown.splitlines()[1])
    if size[0] >= 120:
        for name in ("Events", "Graph breaks"):
            assert _title(shown, name).endswith("rank 0"), _title(shown, name)
        assert _title(shown, "Output").endswith("all ranks")


def test_two_ranks_the_ranks_view_gives_the_same_totals() -> None:
    c = report_of("two_ranks")["compile"]
    shown = screen("two_ranks", (120, 40), "r")
    assert f"{c['compiles']} c {c['recompiles']} rc {c['graph_breaks']} b in all" in shown, shown
    assert "all ranks (the job: Compilation sums them; steps, frames, breaks, events: rank 0)" in shown


def test_a_chosen_rank_is_named_everywhere_and_its_own_totals_shown() -> None:
    shown = screen("two_ranks", (160, 48), "r", "down", "down", "enter")
    assert "Compilation · rank 1" in shown and "2 compiles · 1 recompile" in shown, shown
    assert "Frames · 1 · rank 1" in shown and "Steps · 6 (optimizer) · " in shown and "· rank 1" in shown


def test_one_rank_is_said_as_one_rank() -> None:
    s = Session()
    s.apply({"kind": "process", "t": 1.0, "pid": 11, "rank": 0, "local_rank": 0, "world_size": 1, "host": "h"})
    said = ranks_summary(ViewContext(s))
    assert said is not None and said.startswith("1 rank") and "1 ranks" not in said, said


# -------------------------------------------------- 4: a failed job's traceback


@pytest.mark.parametrize("size", ALL_SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_a_syntax_error_shows_its_traceback_first(size: tuple[int, int]) -> None:
    shown = screen("failed_syntax", size)
    lines = shown.splitlines()
    first = next(i for i, line in enumerate(lines) if "The job failed · exited with code 1" in line)
    assert first == 2, shown  # right under the header
    body = "\n".join(lines[first : first + 6])
    assert "train.py:6" in body and "loss = model(torch.randn(2, 4)).sum(" in body and "^" in body, shown
    assert "SyntaxError: '(' was never closed" in body, shown
    assert "waiting for steps" not in shown


@pytest.mark.parametrize("size", ALL_SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_an_exception_before_any_step_shows_its_traceback_first(size: tuple[int, int]) -> None:
    shown = screen("failed_early", size)
    lines = shown.splitlines()
    first = next(i for i, line in enumerate(lines) if "The job failed · exited with code 1" in line)
    assert first == 2, shown
    body = "\n".join(lines[first:])
    # the user's own line, and the exception; the library frames between them counted
    assert "train.py:8 in <module>" in body and "loss = model(torch.randn(4, 6)).sum()" in body, shown
    assert "torch._dynamo.exc.TorchRuntimeError: RuntimeError when making fake tensor call" in body, shown
    assert re.search(r"… \d+ frames", body), shown


def test_a_launchers_own_traceback_gives_way_to_the_ranks() -> None:
    from ctmon.store.output import OutputLine
    from ctmon.tui.failure import find_failure

    text = [
        "[rank1]: Traceback (most recent call last):",
        '[rank1]:   File "/job/train.py", line 9, in <module>',
        "[rank1]:     step(x)",
        "[rank1]: ValueError: bad batch",
        "Traceback (most recent call last):",
        '  File "/venv/bin/torchrun", line 8, in <module>',
        "    sys.exit(main())",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "train.py FAILED",
    ]
    found = find_failure([OutputLine("stderr", t) for t in text])
    assert found is not None and found.exception == "ValueError: bad batch"
    assert [(f.file, f.line) for f in found.frames] == [("/job/train.py", 9)]


def test_a_job_that_succeeded_or_printed_no_traceback_shows_none() -> None:
    shown = screen("no_gpu", (80, 24))
    assert "The job failed" not in shown
    shown = screen("crashed", (80, 24))  # an exception after five steps
    assert "The job failed · exited with code 1" in shown and "RuntimeError: simulated failure at step 5" in shown


# ------------------------------------------------------------------ 6: smalls


def test_the_step_count_is_said_once() -> None:
    """The header counted steps on its own clock (144 there, 149 in the Steps
    pane); the Steps pane's title is now the one place that says it."""
    shown = screen("healthy", (160, 48))
    assert shown.count("240") == 1 and "Steps · 240 (optimizer)" in shown, shown


def test_an_input_prompt_and_its_answer_are_one_line() -> None:
    buf = OutputBuffer()
    buf.feed("stdout", "TTY True\n")
    buf.feed("stderr", "name? ")  # input() writes its prompt to stderr
    buf.feed("stdout", "bob\n")  # the terminal's echo of the answer
    buf.feed("stdout", "hello bob\n")
    assert [x.text for x in buf.lines] == ["TTY True", "name? bob", "hello bob"]
    assert not buf.partial("stderr") and not buf.partial("stdout")
    bar = OutputBuffer()  # a progress bar is redrawn in place, not continued by a print
    bar.feed("stderr", "\r 50%|#####")
    bar.feed("stdout", "loss 0.3\n")
    assert [x.text for x in bar.lines] == ["loss 0.3"] and bar.partial("stderr") == "\r 50%|#####"


ASK = "import sys\nname = input('name? ')\nprint('hello', name, flush=True)\nprint('done', flush=True)\n"


def test_an_answered_prompt_is_not_left_as_the_outputs_last_line(tmp_path: Any) -> None:
    """A real job under a supervisor (as attach starts it), answered through
    the viewer socket as the TUI's ``i`` answers it, then its recording shown."""
    from ctmon.launch.daemon import start_detached
    from ctmon.launch.spec import JobSpec
    from ctmon.read.feeds import SocketFeed

    job = tmp_path / "ask.py"
    job.write_text(ASK)
    rec = str(tmp_path / "r.jsonl")
    d = start_detached(JobSpec("script", str(job), cwd=str(tmp_path)), rec)
    feed = SocketFeed(d.viewer_path)

    def output() -> str:
        try:
            with open(rec) as f:
                return "".join(json.loads(x).get("data", "") for x in f if '"output"' in x)
        except (OSError, ValueError):
            return ""

    try:
        deadline = time.monotonic() + 60
        while "name? " not in output() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert feed.send_stdin("bob\n")
        while "done" not in output() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        feed.close()
        d.proc.wait(timeout=30)

    async def rows() -> list[str]:
        app = CtmonApp(RecordingFeed(rec), replay=True)
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_loaded(pilot)
            pane = app.screen.query_one(OutputPane)
            return [line.text for line in pane.items]

    shown = asyncio.run(rows())
    assert shown[-3:] == ["name? bob", "hello bob", "done"], shown
