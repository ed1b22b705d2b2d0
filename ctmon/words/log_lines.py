"""The lines of a session's log (the Log pane, the report's log): what each
compile, break, cache result, CUDA graph and exit says to the user.

Plain values in, one line out: the store decides when a line is written,
these say what it reads."""

from __future__ import annotations

REASON_MAX = 200  # a reason quoted in a line is cut to its first line, this long
NO_CUDAGRAPH_REASON = "cudagraph event"  # a skip that said neither why nor what


def first_line(text: str | None, limit: int = REASON_MAX) -> str:
    """The first line of ``text``, at most ``limit`` characters ("" for none)."""
    if not text:
        return ""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:limit]


def second_header(events_so_far: int) -> str:
    return (
        f"recording holds a second session header at event {events_so_far} "
        "(two recordings concatenated?); showing the first"
    )


def limit_hit(compile_id: str, frame: str, where: str) -> str:
    return f"{compile_id} {frame} at {where}: recompile limit hit; this frame now runs eager"


def compile_failed(compile_id: str, frame: str, where: str, fail_type: str | None, reason: str | None) -> str:
    return f"{compile_id} {frame} at {where}: compile failed ({fail_type}): {first_line(reason)}"


def recompiled(compile_id: str, frame: str, where: str, time_s: float, reason: str | None) -> str:
    return f"{compile_id} {frame} at {where} ({time_s:.2f}s): {first_line(reason)}"


def compiled(compile_id: str, frame: str, where: str, time_s: float) -> str:
    return f"{compile_id} {frame} at {where} ({time_s:.2f}s)"


def graph_break(where: str, reason: str) -> str:
    return f"graph break at {where}: {reason}"


def cache_result(cache: str | None, result: str | None, compile_id: str | None, reason: str | None) -> str:
    extra = f" ({reason[:120]})" if result == "bypass" and reason else ""
    return f"{cache} cache {result} [{compile_id}]{extra}"


def kernels_tuned(kernels: int, compile_id: str | None) -> str:
    return f"Triton: {kernels} kernel(s) compiled/tuned [{compile_id}]"


def cudagraph_skipped(reason: str) -> str:
    return f"cudagraphs: {reason[:REASON_MAX]}"


def cudagraph_run(event: str, graph: str | None, compile_id: str | None, sizes: str, dur_s: float) -> str:
    what = "recorded" if event == "record" else "warmed up"
    return f"CUDA graph {what}: {graph or '?'} graph of {compile_id or '?'} ({sizes}) in {dur_s * 1000:.0f} ms"


def job_ended(code: int | None, signal: str | None) -> str:
    what = (
        f"exited with code {code}"
        if code is not None
        else f"killed by {signal}"
        if signal
        else "ended (its exit status is not known to ctmon)"
    )
    return f"job {what}"
