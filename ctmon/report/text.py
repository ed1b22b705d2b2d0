"""Human-readable renderings of a report (plain text, no colour codes).

Both go to a terminal: every recorded string in them is cleaned of control
characters and escape sequences (ctmon.words.textsafe), before wrapping and again
over the finished text.
"""

from __future__ import annotations

from ctmon.report.model import Report, steps_of
from ctmon.report.sentences import all_ranks, generation_text, one_rank, warning_notes
from ctmon.report.text_sections import (
    breaks_section,
    caches_section,
    compile_section,
    counts_line,
    drops_and_notes,
    findings_section,
    frames_section,
    joined_section,
    ranks_section,
    sites_section,
    specializations_section,
    steps_section,
    system_section,
    where,
)
from ctmon.store.session import CUT_OFF
from ctmon.words import locations
from ctmon.words.phrases import cut
from ctmon.words.textsafe import clean, clean_tree
from ctmon.words.units import ms_or_s, seconds

SUMMARY_FINDINGS = 3  # warnings and criticals in the end-of-run summary; the rest are counted


def exit_text(r: Report) -> str:
    if r.get("exit_signal"):
        return f"was killed by {r['exit_signal']}"
    if r.get("exit_code") is None:
        if r.get("state") == CUT_OFF:
            return "has no exit in its recording: ctmon was stopped or killed, or the file was cut short"
        if r.get("state") != "exited":
            return "is still running"
        if r.get("input") == "torch_trace":
            return "ended (a PyTorch trace holds no exit status)"
        joined = r.get("joined")
        if isinstance(joined, dict):
            if joined.get("left_running"):
                return "was joined with --pid and left running"
            return "ended while ctmon was joined (its exit status is not ctmon's to know: ctmon did not start it)"
        return "ended (exit status not known to ctmon)"
    return f"exited with code {r['exit_code']}"


def ended_text(r: Report) -> str:
    """``exited with code 1 after 8.62 s``: how the job ended, and when. A
    PyTorch trace holds no run, only its records' span; a recording cut
    short, how much of the run it holds."""
    d = r.get("duration_s")
    if d is None:
        return exit_text(r)
    if r.get("input") == "torch_trace":
        return f"{exit_text(r)}; its records span {seconds(d)}"
    if r.get("state") == CUT_OFF:
        return f"{exit_text(r)}; {seconds(d)} recorded"
    return f"{exit_text(r)} after {seconds(d)}"


def summary_lines(report: Report, recording: str | None = None) -> list[str]:
    """The few lines `ctmon record` prints after the job's own output."""
    r: Report = clean_tree(report)
    name = " ".join(r.get("command") or []) or "job"
    st, c, cache = steps_of(r), r["compile"], r["cache"]
    lines = [f"ctmon: {name} {ended_text(r)}"]
    if st["count"]:
        timing = "device-timed" if st.get("device_timed") else "host-timed"
        timed = st.get("timed")
        if timed is not None and timed < 0.9 * (st["count"] - 1):
            timing += f", from {timed:,} timed"  # a fast loop's counting stretches (docs/REPORT.md)
        lines.append(
            f"ctmon: {st['count']} steps ({st['source']}): p50 {ms_or_s(st['p50_ms'])}, "
            f"p90 {ms_or_s(st['p90_ms'])}, max {ms_or_s(st['max_ms'])} ({timing}){one_rank(r)}"
        )
    generation = r.get("generation")
    if generation:
        lines.append(f"ctmon: {generation_text(generation)}")
    lines.append(f"ctmon: {counts_line(c)}, {seconds(c['total_time_s'])} compiling{all_ranks(r)}")
    fx, aot = cache.get("fx_graph", {}), cache.get("aot_autograd", {})
    if any(fx.values()) or any(aot.values()):
        lines.append(
            f"ctmon: caches: FX graph {fx.get('hit', 0)} hit / {fx.get('miss', 0)} miss / {fx.get('bypass', 0)} bypass; "
            f"AOTAutograd {aot.get('hit', 0)} hit / {aot.get('miss', 0)} miss / {aot.get('bypass', 0)} bypass"
        )
    serious = [f for f in r.get("findings", []) if f.get("severity") in ("critical", "warning")]
    for f in serious[:SUMMARY_FINDINGS]:
        called = locations.called_from_text(f.get("called_from"), r.get("cwd"))
        at = ", ".join(p for p in (where(f["file"], f.get("line"), r.get("cwd")) if f.get("file") else "", called) if p)
        lines.append(f"ctmon: {f['severity'].upper()}: {f['title']}" + (f" ({at})" if at else ""))
    if len(serious) > SUMMARY_FINDINGS:
        more = len(serious) - SUMMARY_FINDINGS
        lines.append(f"ctmon: +{more} more {'finding' if more == 1 else 'findings'} (ctmon report shows them all)")
    for n in warning_notes(r)[:2]:
        first = n["message"].strip().splitlines()[0] if n["message"].strip() else ""
        lines.append(f"ctmon: {n['level'].upper()}: {cut(first, 300)}")
    drops = r.get("drops") or {}
    if drops.get("steps") or drops.get("events"):
        lines.append(
            f"ctmon: dropped {drops.get('steps', 0)} step and {drops.get('events', 0)} other events (the monitor fell behind)"
        )
    if recording:
        lines.append(f"ctmon: recording: {recording}  (ctmon report {recording})")
    return [clean(line) for line in lines]


def full_text(report: Report) -> str:
    r: Report = clean_tree(report)
    cwd = r.get("cwd")
    out = _heading(r)
    joined = r.get("joined")
    if isinstance(joined, dict):
        out += joined_section(joined, cwd)
    out += findings_section(r.get("findings") or [], cwd)
    out += steps_section(r)
    out += ranks_section(r)
    out += compile_section(r)
    out += sites_section(r, cwd)
    out += specializations_section(r, cwd)
    out += frames_section(r, cwd)
    out += breaks_section(r, cwd)
    out += system_section(r.get("system"))
    out += caches_section(r)
    out += drops_and_notes(r)
    return clean("\n".join(out) + "\n")


def _heading(r: Report) -> list[str]:
    """The job, how it ended, and what it ran on."""
    name = " ".join(r.get("command") or []) or "job"
    ended = ended_text(r)
    out = [f"ctmon report — {name}", f"  {ended[:1].upper()}{ended[1:]}"]
    env = ", ".join(
        x
        for x in (
            f"torch {r['torch']}" if r.get("torch") else None,
            f"CUDA {r['cuda']}" if r.get("cuda") else None,
            f"triton {r['triton']}" if r.get("triton") else None,
            f"Python {r['python']}" if r.get("python") else None,
        )
        if x
    )
    if env:
        out.append(f"  {env}")
    out += [f"  GPU {d.get('index')}: {d.get('name')}" for d in r.get("devices") or []]
    return out
