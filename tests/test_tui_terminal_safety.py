"""No recorded string reaches the terminal raw (issue 11, terminal injection).

A recording holds text ctmon does not control: PyTorch's messages, frame and
file names, notes, the command, the job's output. Escape sequences in it
must not set the window title, clear the screen or write the clipboard
(OSC 52) through `ctmon report` (text, --md), record's end-of-run summary,
`ctmon replay` or the live TUI's panes and detail screens; Rich/Textual
markup in it shows literally.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import io
import json
import os
import re
import shutil
import sys
import time

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctmon.cli import main as cli_main
from ctmon.read.feeds import Feed, ListFeed, RecordingFeed
from ctmon.report.build import build_report
from ctmon.report.text import summary_lines
from ctmon.store import Session
from ctmon.tui.app import CtmonApp
from ctmon.tui.screens import DetailScreen
from ctmon.tui.testing import wait_loaded
from ctmon.words.textsafe import PLACEHOLDER, clean, clean_tree, plain_json, unsafe_spans

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "recordings")

# What a terminal acts on, or what reorders text for the reader.
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")

TITLE = "\x1b]0;PWNED\x07"
CLIPBOARD = "\x1b]52;c;UFdORUQ=\x07"
CLEAR = "\x1b[2J"
ATTACKS = [
    TITLE,
    CLIPBOARD,
    CLEAR,
    "\x1b[H",
    "\x1bc",
    "\x1b[31m",
    "\x1b[0m",
    "\x9b2J",
    "\x9d0;c1\x9c",
    "\x1bP1$q\x1b\\",
    "\x1b]8;;http://evil/\x07\x1b\\link\x1b]8;;\x1b\\",
    "\x1b]0;unterminated",
    "\x1b",
    "\x07",
    "\r",
    "\r\n",
    "\x08",
    "\x00",
    "\x7f",
    "\x85",
    "\u202e",
    "\u2028",
    "\t",
    "[bold red]x",
    "[/]",
    "[/bold]",
    "[link=http://x]y[/link]",
    "[@click=app.quit]q[/]",
    "\\[",
    "]",
]

# Fields whose values select behaviour (enumerations, ids that link events):
# kept valid so the fuzzed recording still exercises every view.
KEEP = {"kind", "mode", "src", "stream", "cache", "result", "level", "compile_id", "v", "ctmon"}


def assert_safe(out: str, where: str) -> None:
    m = UNSAFE.search(out)
    assert m is None, (
        f"{where}: {m.group()!r} reaches the terminal at {m.start()}: {out[max(0, m.start() - 60) : m.start() + 60]!r}"
    )


def base_events() -> list[dict]:
    """A small recording with every event kind and every string field a view
    shows: compiles, a recompile, a limit hit, a failure, graph breaks, cache
    hits/misses/bypasses, autotune, cudagraphs, notes, drops, GPU samples."""
    with open(os.path.join(FIXTURES, "no_gpu.jsonl")) as f:
        events = [json.loads(line) for line in f if line.strip()]
    end = events.pop()
    t = end["t"] - 0.5
    gpu = {
        "index": 0,
        "name": "NVIDIA H100",
        "util": 50,
        "mem_util": 10,
        "mem_used": 1 << 30,
        "mem_total": 80 << 30,
        "power_w": 100.0,
        "power_limit_w": 700.0,
        "temp_c": 40,
        "sm_clock_mhz": 1000,
        "proc_mem": 1 << 29,
    }
    events[2]["env"] = {"TORCH_LOGS": "recompiles"}
    events += [
        {
            "kind": "devices",
            "t": t,
            "current": 0,
            "visible": "0",
            "cuda": [dict(index=0, name="NVIDIA H100", total_memory=80 << 30, capability="9.0", sms=132)],
        },
        {"kind": "sample", "t": t, "cpu_percent": 50.0, "rss": 1 << 28, "gpus": [gpu], "gpu_error": "no NVML"},
        {
            "kind": "compile_call",
            "t": t,
            "target": "Net",
            "target_module": "__main__",
            "file": "/home/alice/proj/graph_breaks.py",
            "line": 30,
            "backend": "inductor",
            "mode": "default",
        },
        {
            "kind": "compile_start",
            "t": t,
            "compile_id": "2/2",
            "frame_id": 2,
            "name": "torch_dynamo_resume_in_forward_at_14",
            "file": "/home/alice/proj/graph_breaks.py",
            "line": 14,
            "user_code": True,
            "called_from": {"file": "/home/alice/proj/train.py", "line": 12, "name": "<module>", "code": "model(x)"},
        },
        {
            "kind": "compile",
            "t": t,
            "compile_id": "2/2",
            "frame_id": 2,
            "fail_type": "Unsupported",
            "fail_reason": "Dynamo recompile limit exceeded (recompile_limit=8)",
            "recompile_reason": "size mismatch at index 0",
        },
        {
            "kind": "compile",
            "t": t,
            "compile_id": "3/0",
            "frame_id": 3,
            "co_name": "broken",
            "co_filename": "/home/alice/proj/m.py",
            "co_firstlineno": 3,
            "fail_type": "BackendCompilerFailed",
            "fail_reason": "backend exploded",
            "fail_user_frame_filename": "/home/alice/proj/m.py",
            "fail_user_frame_lineno": 4,
            "non_compliant_ops": ["aten.weird"],
            "cudagraph_skip_reason": "mutated inputs",
        },
        {
            "kind": "bwd_compile",
            "t": t,
            "compile_id": "0/0",
            "frame_id": 0,
            "fail_type": "Err",
            "fail_reason": "bwd failed",
            "cudagraph_skip_reason": "cpu device",
        },
        {
            "kind": "cache",
            "t": t,
            "compile_id": "0/0",
            "frame_id": 0,
            "cache": "fx_graph",
            "result": "miss",
            "key": "k1",
            "detail": "miss",
        },
        {
            "kind": "cache",
            "t": t,
            "compile_id": "1/0",
            "frame_id": 1,
            "cache": "fx_graph",
            "result": "bypass",
            "key": "k2",
            "reason": "unpicklable closure",
        },
        {
            "kind": "cache",
            "t": t,
            "compile_id": "1/0",
            "frame_id": 1,
            "cache": "aot_autograd",
            "result": "hit",
            "key": "k3",
            "time_saved_s": 1.5,
        },
        {
            "kind": "autotune",
            "t": t,
            "compile_id": "0/0",
            "kernels": [{"name": "triton_poi_0", "autotune_cache_state": "hit", "num_configs": 4}],
        },
        {"kind": "cudagraph", "t": t, "reason": "skipping cudagraphs due to cpu device"},
        {"kind": "note", "t": t, "level": "warning", "source": "ctmon", "message": "hook disabled"},
        {"kind": "note", "t": t, "level": "error", "source": "dynamo", "message": "dynamo error: boom"},
        {"kind": "drops", "t": t, "events": 3, "steps": 2},
        {"kind": "output", "t": t, "stream": "stderr", "data": "progress 50%\rprogress 100%\nlast line"},
        {**end, "code": None, "signal": "SIGKILL"},
    ]
    return events


BASE = base_events()


def poison(events: list[dict], nasty: list[str], keep: frozenset[str] | set[str] = KEEP) -> list[dict]:
    """Every free-text string in ``events`` with attack text added: the same
    original string always gets the same addition (ids and paths that link
    events stay linked), cycling through ``nasty`` and alternating prefix and
    suffix so text is attacked at both ends."""
    memo: dict[str, str] = {}

    def fix(s: str) -> str:
        if s not in memo:
            n = len(memo)
            bad = nasty[n % len(nasty)]
            memo[s] = s + bad if n % 2 == 0 else bad + s
        return memo[s]

    def walk(value, key: str | None):  # type: ignore[no-untyped-def]
        if isinstance(value, str):
            return value if key in keep else fix(value)
        if isinstance(value, dict):
            return {k: walk(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, key) for v in value]
        return value

    return [walk(copy.deepcopy(e), None) for e in events]


any_char = st.characters(min_codepoint=0, max_codepoint=0x2100, exclude_categories=("Cs",))
nasty_text = st.lists(st.one_of(st.sampled_from(ATTACKS), st.text(any_char, max_size=6)), min_size=1, max_size=4).map(
    "".join
)
nasty_lists = st.lists(nasty_text, min_size=1, max_size=8)


# ------------------------------------------------------------- the sanitiser


def test_clean_replaces_each_sequence_by_one_placeholder() -> None:
    P = PLACEHOLDER
    assert clean(f"a{TITLE}b") == f"a{P}b"  # no "]0;PWNED" left behind
    assert clean(f"x{CLIPBOARD}y") == f"x{P}y"
    assert clean(f"{CLEAR}z\x1b[1;31mred\x1b[0m") == f"{P}z{P}red{P}"
    assert clean("\x1bP1$q\x1b\\|\x1bc|\x1b(B|\x9b2J|\x9d0;t\x9c") == f"{P}|{P}|{P}|{P}|{P}"
    assert clean("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\") == f"{P}link{P}"
    # C0 (but newline and tab), DEL, C1, bidi overrides and line separators
    assert clean("\x00\x07\x08\x0b\x0c\x0e\x1f\x7f\x80\x85\x9f") == P * 11
    assert clean("ab\u202ecd\u2066\u2028") == f"ab{P}cd{P}{P}"
    assert clean("line\r\nnext\rover") == f"line\nnext{P}over"
    assert (
        clean("keep\ttabs\nand lines, ünïcödé, 中文, [bold]x[/]") == "keep\ttabs\nand lines, ünïcödé, 中文, [bold]x[/]"
    )
    assert clean("a\tb", tab=" ") == "a b"


def test_clean_keeps_colours_only_on_request() -> None:
    assert clean("\x1b[31mred\x1b[0m", keep_sgr=True) == "\x1b[31mred\x1b[0m"
    assert clean(f"\x1b[31m{TITLE}\x1b[2J", keep_sgr=True) == f"\x1b[31m{PLACEHOLDER}{PLACEHOLDER}"


def test_an_unterminated_sequence_loses_its_introducer() -> None:
    # a terminal would swallow the rest; shown as text it is harmless
    assert clean("\x1b]0;no end") == f"{PLACEHOLDER}0;no end"
    assert clean("a\x1b") == f"a{PLACEHOLDER}"


def test_clean_tree_cleans_keys_and_values_and_survives_depth() -> None:
    assert clean_tree({"k\x1b": ["v\x07", 3, None, {"x": "\x9b"}]}) == {
        f"k{PLACEHOLDER}": [f"v{PLACEHOLDER}", 3, None, {"x": PLACEHOLDER}]
    }
    deep: list = ["\x1b"]
    for _ in range(5000):
        deep = [deep]
    clean_tree(deep)  # no RecursionError


@settings(max_examples=300, deadline=None)
@given(st.text(any_char, max_size=40), st.booleans())
def test_clean_output_is_always_safe(text: str, keep_sgr: bool) -> None:
    out = clean(text, keep_sgr=keep_sgr)
    if keep_sgr:
        out = re.sub(r"\x1b\[[0-9;:]*m", "", out)
    assert_safe(out, "clean")
    assert clean(clean(text)) == clean(text)
    if UNSAFE.search(text) is None:
        assert clean(text) == text
    assert all(s < e for s, e, _ in unsafe_spans(text))


# --------------------------------------------------------------- the reports


def _cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(list(args))
    return code, out.getvalue(), err.getvalue()


def _write(tmp: str, events: list[dict]) -> str:
    path = os.path.join(tmp, "rec.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for e in events:
            f.write(json.dumps(e, ensure_ascii=False) + "\n")
    return path


def test_the_base_recording_exercises_every_view(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r = build_report(Session().apply_all(BASE))
    assert r["compile"]["limit_hits"] and r["compile"]["failures"] and r["compile"]["recompiles"]
    assert r["graph_breaks"] and r["cache"]["bypass_reasons"] and r["cudagraphs"]["skips"]
    assert r["findings"] and any(f.get("evidence") for f in r["findings"])
    assert r["notes"] and r["devices"] and r["exit_signal"] == "SIGKILL"


def test_report_text_and_markdown_show_no_escape_sequence(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = _write(str(tmp_path), poison(BASE, [TITLE, CLIPBOARD, CLEAR]))
    for args in ((), ("--md",)):
        code, out, err = _cli("report", path, *args)
        assert code == 0, err
        assert_safe(out, f"report {' '.join(args)}")
        assert "PWNED" not in out and "UFdORUQ" not in out  # the whole sequence went, not just ESC
        assert "graph_breaks.py" in out
    lines = summary_lines(build_report(Session().apply_all(poison(BASE, [TITLE]))), path)
    assert_safe("\n".join(lines), "record's summary")


def test_json_report_keeps_what_was_recorded(tmp_path) -> None:  # type: ignore[no-untyped-def]
    events = poison(BASE, [TITLE])
    code, out, _ = _cli("report", _write(str(tmp_path), events), "--json")
    assert code == 0
    assert_safe(out, "report --json")  # JSON escapes control characters itself
    assert any(TITLE in (n["message"] or "") for n in json.loads(out)["notes"])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nasty_lists, st.booleans())
@pytest.mark.slow
def test_fuzz_reports(nasty: list[str], ids_too: bool) -> None:
    import tempfile

    # ids_too: also the ids and enumerations (events then stop linking up)
    events = poison(BASE, nasty, {"kind"} if ids_too else KEEP)
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(tmp, events)
        for args in ((), ("--md",)):
            code, out, err = _cli("report", path, *args)
            assert code == 0, err
            assert_safe(out, f"report {' '.join(args)}")
            assert_safe(err, "report's warnings")
    lines = summary_lines(build_report(Session().apply_all(events)), "rec.jsonl")
    assert_safe("\n".join(lines), "record's summary")


# ---------------------------------------------------------------------- TUI


def _screen_segments(app: CtmonApp) -> str:
    """The characters of every segment the screen would write (Textual's own
    cursor and style sequences are not in segment text)."""
    parts = []
    for strip in app.screen._compositor.render_strips():
        for seg in strip:
            if seg.control is None:
                parts.append(seg.text)
        parts.append("\n")
    return "".join(parts)


def _one_of_each(items: list) -> list[int]:
    """Indices of the first item of each kind (every detail view, not every row)."""
    firsts: dict[object, int] = {}
    for i, item in enumerate(items):
        firsts.setdefault((type(item).__name__, getattr(item, "kind", None)), i)
    return sorted(set(firsts.values()) | {len(items) - 1} if items else set())


async def _walk_tui(events: list[dict], size: tuple[int, int] = (160, 48), feed: Feed | None = None) -> list[str]:
    """Draw the main screen and every detail screen (frames, breaks, events,
    output, findings); return what each would write."""
    seen = []
    app = CtmonApp(feed or ListFeed(events), replay=True, title="rec\x1b]0;PWNED\x07.jsonl")
    async with app.run_test(size=size) as pilot:
        await wait_loaded(pilot)
        await pilot.pause()
        seen.append(("main", _screen_segments(app)))
        main = app.main
        assert main is not None
        for name in ("frames", "breaks", "events", "output"):
            pane = main.pane(name)
            main.set_current(name)
            await pilot.pause()
            seen.append((f"{name} pane", _screen_segments(app)))
            for index in _one_of_each(pane.items):
                pane._move_to(index)
                await pilot.press("enter")
                if isinstance(app.screen, DetailScreen):
                    await pilot.pause()
                    seen.append((f"{name} detail {index}", _screen_segments(app)))
                    await pilot.press("escape")
                    await pilot.pause()
        await pilot.press("a")
        await pilot.pause()
        assert isinstance(app.screen, DetailScreen)
        seen.append(("findings", _screen_segments(app)))
    for where, text in seen:
        assert_safe(text, where)
    return [text for _, text in seen]


@pytest.mark.slow
def test_tui_shows_no_escape_sequence_and_markup_literally() -> None:
    events = poison(BASE, [TITLE, CLIPBOARD, "[bold red]x", CLEAR, "[/]"])
    screens = asyncio.run(_walk_tui(events))
    shown = "".join(screens)
    assert "PWNED" not in shown and "UFdORUQ" not in shown
    assert "[bold red]x" in shown and "[/]" in shown  # markup shown as typed, not interpreted


@pytest.mark.parametrize("ascii_only", [False, True], ids=["utf8", "ascii-escapes"])
@pytest.mark.slow
def test_a_recording_on_disk_is_cleaned_as_it_is_decoded(tmp_path, ascii_only: bool) -> None:  # type: ignore[no-untyped-def]
    """A recording read from disk is cleaned by its feed, line by line, from
    the bytes (only lines that may hold a control are decoded events cleaned);
    a writer that escapes every non-ASCII character (``\u202e``, ``\u009b``)
    must not slip past that glance."""
    events = poison(BASE, [TITLE, "\u202e", "\x9b2J", CLIPBOARD, "\u2066x"])
    path = os.path.join(str(tmp_path), "rec.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for e in events:
            f.write(json.dumps(e, ensure_ascii=ascii_only) + "\n")
    screens = asyncio.run(_walk_tui([], feed=RecordingFeed(path)))
    assert "PWNED" not in "".join(screens)


_printable_or_not = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=("Cs",))


@settings(max_examples=500, deadline=None)
@given(st.text(_printable_or_not, max_size=12), st.booleans())
def test_plain_json_never_passes_an_unsafe_string(text: str, ascii_only: bool) -> None:
    for data in (json.dumps({"s": text}, ensure_ascii=ascii_only).encode(), msgspec.json.encode({"s": text})):
        if plain_json(data):
            assert UNSAFE.search(text) is None, (text, data)
    if not UNSAFE.search(text) and text.isascii() and text.isprintable():
        assert plain_json(json.dumps({"s": text}).encode())  # the glance passes most text


class _BrokenFeed(ListFeed):
    """A feed whose source fails with a message holding markup and escapes
    (an error text can quote a path or a peer's bytes)."""

    def batches(self):  # type: ignore[no-untyped-def]
        yield from super().batches()
        raise OSError(f"read [/] [bold red]failed{TITLE}")


def test_a_feed_error_is_shown_literally() -> None:
    async def run() -> str:
        app = CtmonApp(_BrokenFeed(copy.deepcopy(BASE)), replay=True)
        async with app.run_test(size=(160, 48), notifications=True) as pilot:
            await wait_loaded(pilot)
            await pilot.pause(0.2)
            return _screen_segments(app)

    shown = asyncio.run(run())
    assert_safe(shown, "the feed-error notification")
    assert "read [/] [bold red]failed" in shown


@pytest.mark.slow
def test_tui_with_every_string_poisoned() -> None:
    # ids and enumerations too (compile ids, levels, sources, stream names)
    asyncio.run(_walk_tui(poison(BASE, [TITLE, "\x9b2J", "[/]", "\x1b"], keep={"kind"})))


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nasty_lists)
@pytest.mark.slow
def test_fuzz_tui(nasty: list[str]) -> None:
    asyncio.run(_walk_tui(poison(BASE, nasty)))


def test_the_sanitiser_is_standard_library_only() -> None:
    # the report, the supervisor and the viewer all use it
    import subprocess

    code = "import sys, ctmon.words.textsafe; bad = {'rich', 'textual', 'torch'} & set(sys.modules); print(sorted(bad))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=dict(os.environ, PYTHONPATH=ROOT)
    )
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr


# ------------------------------------------------------- a real terminal (tmux)


def _attack_recording(path: str) -> None:
    """Title, clipboard and clear-screen sequences in a graph-break reason, a
    frame name, a note and the command."""
    all3 = TITLE + CLIPBOARD + CLEAR
    events = copy.deepcopy(BASE)
    for e in events:
        if e["kind"] == "session":
            e["command"] = ["python", f"train{TITLE}.py", f"--x{CLIPBOARD}{CLEAR}"]
        elif e["kind"] == "compile_start" and e["frame_id"] == 0:
            e["name"] = f"forward{all3}"
        elif e["kind"] == "compile" and e.get("frame_id") == 0:
            e["co_name"] = f"forward{all3}"
        elif e["kind"] == "graph_break":
            e["reason"] = f"boom{all3} " + e["reason"]
            e["summary"] = f"boom{all3} " + e.get("summary", "")
        elif e["kind"] == "note":
            e["message"] = f"note{all3}"
    _write_to(path, events)


def _write_to(path: str, events: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for e in events:
            f.write(json.dumps(e, ensure_ascii=False) + "\n")


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
@pytest.mark.slow
def test_report_and_replay_leave_the_terminal_alone(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from test_tui_e2e import Tmux

    rec = str(tmp_path / "attack.jsonl")
    _attack_recording(rec)
    tmux_dir = tmp_path / "tmux"
    tmux_dir.mkdir()
    tm = Tmux(str(tmux_dir))
    prompt = "SAFE-READY$ "
    try:
        tm(
            "new-session",
            "-d",
            "-s",
            "e2e",
            "-x",
            "160",
            "-y",
            "400",
            "-e",
            f"PYTHONPATH={ROOT}",
            "bash --norc --noprofile",
        )
        # tmux keeps what OSC 52 writes as a paste buffer when this is on,
        # and takes a pane's title from OSC 0/2: the attack would show
        tm("set", "-g", "set-clipboard", "on")
        tm("send-keys", "-t", "e2e", f"export PS1='{prompt}'; cd {ROOT} && clear", "Enter")
        tm.wait_for(lambda s: prompt.strip() in s, 15, "the shell prompt")

        def untouched(title: str, where: str) -> None:
            assert tm("display-message", "-p", "-t", "e2e", "#{pane_title}").strip() == title, where
            assert tm("list-buffers").strip() == "", f"{where}: OSC 52 wrote the clipboard"

        title = tm("display-message", "-p", "-t", "e2e", "#{pane_title}").strip()
        assert "PWNED" not in title

        for args in ("", " --md"):
            tm("send-keys", "-t", "e2e", "clear", "Enter")
            tm(
                "send-keys",
                "-t",
                "e2e",
                f"echo BEFORE-REPORT; {sys.executable} -m ctmon report {rec}{args}; echo AFTER-REPORT",
                "Enter",
            )
            screen = tm.wait_for(lambda s: "\nAFTER-REPORT" in s, 60, f"report{args}")
            untouched(title, f"report{args}")
            # not cleared: what was printed before the report is still on the screen
            assert "\nBEFORE-REPORT" in screen and "graph_breaks.py" in screen, screen
            assert "PWNED" not in screen

        # the reports needed 400 rows to stay on screen whole; the TUI does
        # not, and a 400-row first paint is slow on a loaded machine
        tm("resize-window", "-t", "e2e", "-x", "160", "-y", "50")
        tm("send-keys", "-t", "e2e", "clear", "Enter")
        tm("send-keys", "-t", "e2e", f"{sys.executable} -m ctmon replay {rec}", "Enter")

        def replay_shown(s: str) -> bool:
            return "Graph breaks" in s and "forward" in s

        # 90 s, as for the live screen: on a loaded CI box (the other test
        # worker compiling) the replay once took over 30 s to start drawing
        with contextlib.suppress(AssertionError):  # a swallowed screen is told below, after the title
            tm.wait_for(replay_shown, 90, "the replay screen")
        untouched(title, "replay")
        assert replay_shown(tm.screen()), tm.screen()
        tm("send-keys", "-t", "e2e", "Tab")
        time.sleep(0.5)
        tm("send-keys", "-t", "e2e", "Enter")
        detail = tm.wait_for(lambda s: " back " in s and "boom" in s, 30, "the break's detail screen")
        assert "boom" in detail and "PWNED" not in detail
        untouched(title, "the break's detail screen")
        tm("send-keys", "-t", "e2e", "q")
        time.sleep(0.5)
        tm("send-keys", "-t", "e2e", "q")
        tm.wait_for(lambda s: s.rstrip().endswith(prompt.rstrip()), 30, "the shell prompt after replay")
        untouched(title, "after replay")
    finally:
        tm.kill()


@pytest.mark.slow
def test_a_real_job_cannot_reach_the_terminal_through_ctmon(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A real torch.compile job puts escapes in a graph_break(msg=...), a
    frame's name and file name, and its own script's name (so the command):
    record's summary, the reports and the TUI's screens stay clean."""
    from helpers import ctmon, record, workload

    script = tmp_path / f"job{TITLE}.py"
    shutil.copy(workload("terminal_attack.py"), script)
    run = record(tmp_path, [str(script)], torch_trace=False, timeout=240)
    assert run.returncode == 0, run.proc.stderr
    events = run.events()
    breaks = [e for e in events if e["kind"] == "graph_break"]
    assert breaks and all(TITLE in e["reason"] for e in breaks)  # the attack is in the recording
    assert any(TITLE in (e.get("co_name") or "") for e in events if e["kind"] == "compile")
    assert TITLE in events[0]["command"][-1]
    # the job printed nothing itself: all of this is ctmon's
    assert_safe(run.proc.stdout + run.proc.stderr, "record's summary")
    assert "graph breaks" in run.proc.stderr
    for args in ((), ("--md",)):
        p = ctmon("report", run.recording, *args)
        assert p.returncode == 0, p.stderr
        assert_safe(p.stdout + p.stderr, f"report {' '.join(args)}")
        assert "PWNED" not in p.stdout and "graph_break()" in p.stdout
    screens = asyncio.run(_walk_tui(events))
    assert any("Call to `torch._dynamo.graph_break()`" in s for s in screens)
    # no leftover of a half-removed sequence (PyTorch's debug context quotes
    # the message as a repr, "\\x1b]0;PWNED", which is harmless text)
    assert not any(re.search(r"(?<!\\x1b)\]0;PWNED", s) for s in screens)


def test_watch_list_shows_a_command_with_escapes_safely(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from helpers import ctmon, env_with

    rt = tmp_path / "run"
    sdir = rt / "20260101-000000-job-1"
    sdir.mkdir(parents=True, mode=0o700)
    rt.chmod(0o700)
    (sdir / "viewer.sock").write_text("")
    info = {
        "id": sdir.name,
        "job_pid": 1,
        "supervisor_pid": os.getpid(),
        "start": time.time(),
        "state": "running",
        "command": ["python", f"job{TITLE}.py", f"--x{CLIPBOARD}{CLEAR}"],
    }
    (sdir / "session.json").write_text(json.dumps(info))
    out = ctmon("watch", "--list", env=env_with(CTMON_RUNTIME_DIR=str(rt)), timeout=60)
    assert out.returncode == 0, out.stderr
    assert "python job" in out.stdout
    assert_safe(out.stdout + out.stderr, "watch --list")


def test_error_lines_quote_file_names_safely(tmp_path) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / f"sent{TITLE}.jsonl"
    bad.write_text("not a recording\n")
    for args in (
        ("report", str(bad)),
        ("report", str(bad) + "-missing"),
        ("replay", str(bad)),
        ("report", str(bad), f"--x{CLEAR}"),
        (f"rep{CLEAR}ort",),
    ):
        code, out, err = _cli(*args)
        assert code == 2, (args, err)
        assert err.startswith("ctmon: ") and err.count("\n") == 1, err
        assert_safe(out + err, f"ctmon {args[0]!r}")
        assert "PWNED" not in err
