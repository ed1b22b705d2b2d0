"""The text report's sections, one function each, in the order
``full_text`` prints them. Each takes a report already cleaned of control
characters and returns its lines (a blank line before a section's title)."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from typing import Any

from ctmon.report.model import (
    Cache,
    CompileTotals,
    Finding,
    Frame,
    GraphBreak,
    Report,
    System,
    cache_results,
    steps_of,
)
from ctmon.report.sentences import (
    NOTES_SHOWN,
    all_ranks,
    compile_counts_text,
    first_step_text,
    generation_text,
    numbering_text,
    primary,
    rank_lines,
    warning_notes,
)
from ctmon.store.compiles import is_limit_hit, split_reason
from ctmon.store.joined import FRAMES_SHOWN, from_report
from ctmon.words import locations
from ctmon.words.labels import CACHE_NAMES, PHASE_NAMES
from ctmon.words.phrases import cut, plural
from ctmon.words.units import gib_or_mib, ms_or_s, seconds


def wrap(text: str, first: str, rest: str, width: int = 100) -> str:
    return "\n".join(textwrap.wrap(text, width, initial_indent=first, subsequent_indent=rest)) or first.rstrip()


def where(file: str | None, line: int | None, cwd: str | None = None) -> str:
    return locations.where(file, line, cwd)


def lead(item: Frame | GraphBreak, cwd: str | None) -> str:
    """`` (called from train.py:42)`` after a place in a library's code."""
    text = locations.called_from_text(item.get("called_from"), cwd)
    return f" ({text})" if text else ""


def counts_line(c: CompileTotals, limit: bool = False) -> str:
    counts = compile_counts_text(
        c["compiles"], c["recompiles"], c["limit_hits"], c.get("recompile_limit") if limit else None
    )
    hits = "" if c["limit_hits"] else f", {plural(0, 'recompile-limit hit')}"
    return f"{counts}, {plural(c['graph_breaks'], 'graph break')}{hits}"


def joined_section(joined: dict[str, Any], cwd: str | None) -> list[str]:
    """--pid: what Dynamo had done before ctmon joined, said as that (ctmon
    saw none of it happen: every count below the section is from the join on)."""
    before = from_report(joined)
    lines = ["", "Before ctmon joined (read from PyTorch's own state; not counted below)"]
    lines.append(wrap(before.summary().removeprefix("before ctmon joined: "), "  ", "    "))
    for f in before.frames[:FRAMES_SHOWN]:
        label = f"{where(f.file, f.line, cwd)} {f.name}"
        if f.modules:
            label += f" (torch.compile of {', '.join(f.modules)})"
        lines.append(wrap(f"{label}: {f.versions} compiled version(s)", "  - ", "    "))
    more = before.frame_count - min(len(before.frames), FRAMES_SHOWN)
    if more > 0:
        lines.append(f"  - and {more} more")
    return lines


def findings_section(findings: list[Finding], cwd: str | None) -> list[str]:
    if not findings:
        return []
    out = ["", f"Findings ({len(findings)})"]
    for f in findings:
        out.append(f"  [{f['severity']}] {f['title']}")
        called = f.get("called_from")
        if called and called.get("file"):  # the user's own line first, then the library's
            out.append(
                f"      {locations.called_from_text(called, cwd)}"
                + (f": {called['code']}" if called.get("code") else "")
            )
        if f.get("file"):
            out.append(f"      at {where(f.get('file'), f.get('line'), cwd)}")
        for e in (f.get("evidence") or [])[:4]:
            out.append(wrap(e, "      - ", "        "))
        if f.get("fix"):
            out.append(wrap(str(f["fix"]), "      fix: ", "           "))
    return out


def steps_section(r: Report) -> list[str]:
    st = steps_of(r)
    out = ["", "Steps"]
    if st["count"] is None:
        out.append("  not in a PyTorch trace (step times, samples and output need a recording: ctmon record)")
        return out
    if not st["count"]:
        out.append("  no step boundaries seen (no optimizer.step(), no compiled model calls, no ctmon.step())")
        return out
    out.append(
        f"  {st['count']} steps from {st['source']}"
        + (" (device-timed with CUDA events)" if st.get("device_timed") else "")
    )
    numbers = st.get("numbers")
    if numbers:
        out.append(f"  {numbering_text(numbers, st.get('source'))}")
    first = first_step_text(st)
    if first:
        out.append(f"  {first}")
    out.append(
        f"  p50 {ms_or_s(st['p50_ms'])}  p90 {ms_or_s(st['p90_ms'])}  p99 {ms_or_s(st['p99_ms'])}  "
        f"mean {ms_or_s(st['mean_ms'])}  max {ms_or_s(st['max_ms'])}"
    )
    if st.get("compile_steps"):
        out.append(f"  {st['compile_steps']} step(s) paid for a compile")
    rt = st.get("runtime")
    if rt and rt.get("graph_share") is not None:
        how = "host; graphs timed, the rest sampled" if rt.get("graphs_timed") else "sampled, host"
        text = (
            f"step time ({how}): {rt['graph_share']:.0%} in compiled graphs, "
            f"{rt['glue_share']:.0%} in compiled frames' eager code between graphs, "
            f"{rt['other_share']:.0%} elsewhere ({rt['samples']} samples)"
        )
        out.append(wrap(text, "  ", "    "))
    generation = r.get("generation")
    if generation:
        out.append(wrap(generation_text(generation), "  ", "    "))
    return out


def ranks_section(r: Report) -> list[str]:
    ranks = r.get("ranks") or []
    if not ranks:
        return []
    title = f"Ranks ({len(ranks)}; totals below are their sums, the other sections show rank {primary(ranks)})"
    return ["", title] + [f"  {line}" for line in rank_lines(ranks)]


def compile_section(r: Report) -> list[str]:
    c = r["compile"]
    out = ["", f"Compilation{all_ranks(r, ' (', ')')}"]
    limit = f" of limit {c['recompile_limit']}" if c.get("recompile_limit") and not c["limit_hits"] else ""
    out.append(f"  {counts_line(c, limit=True)}{limit}, {plural(c['failures'], 'failure')}")
    out.append(
        f"  {seconds(c['total_time_s'])} compiling ({seconds(c['forward_time_s'])} frames + "
        f"{seconds(c['backward_time_s'])} backward graphs)"
    )
    ph = c.get("phases_s")
    if ph and ph.get("backend"):
        out.append(
            f"  frames: Dynamo {seconds(ph['dynamo'])}, backend {seconds(ph['backend'])} "
            f"(Inductor {seconds(ph['inductor'])}, of it code generation {seconds(ph['code_gen'])})"
        )
    traced = c.get("traced_phases_s") or {}
    if traced:
        out.append("  PyTorch's phase timers (nested: Inductor runs inside AOTAutograd or a backward graph's compile):")
        out.append("    " + ", ".join(f"{PHASE_NAMES.get(k, k)} {seconds(v)}" for k, v in traced.items()))
    return out


def sites_section(r: Report, cwd: str | None) -> list[str]:
    sites = r.get("compile_sites") or []
    if not sites:
        return []
    out = ["", "Where compiles began (your line → compile ids)"]
    for site in sites[:8]:
        ids = site["compile_ids"]
        shown = ", ".join(ids[:6]) + (f", … {len(ids) - 6} more" if len(ids) > 6 else "")
        code = f"  `{site['code']}`" if site.get("code") else ""
        out.append(f"  {where(site['file'], site['line'], cwd)}{code}  → {shown}")
    return out


def specializations_section(r: Report, cwd: str | None) -> list[str]:
    specs = r.get("specializations") or []
    if not specs:
        return []
    out = ["", "Sizes Dynamo specialised to one value (a new value recompiles)"]
    for x in specs[:8]:
        what = ", ".join(x["sources"][:2]) or "?"
        code = f"  `{x['code']}`" if x.get("code") else ""
        out.append(
            f"  {what} = {x['value']} at {where(x['file'], x['line'], cwd)}{code}  ({x['reason']}; {x['compile_id']})"
        )
    if len(specs) > 8:
        out.append(f"  … {len(specs) - 8} more (report --json: specializations)")
    return out


def frames_section(r: Report, cwd: str | None) -> list[str]:
    frames = r.get("frames") or []
    if not frames:
        return []
    out = ["", "Frames"]
    for f in frames:
        flag = "  LIMIT HIT, runs eager" if f["limit_hit"] else ""
        counts = compile_counts_text(f["compiles"], f["recompiles"], _refused(r, f))
        out.append(
            f"  {where(f['file'], f['line'], cwd)}  {f['name']}: {counts}, {seconds(f['time_s'])}{flag}{lead(f, cwd)}"
        )
        frt = f.get("runtime")
        calls = frt.get("calls") if frt else None
        if calls is not None:
            out.append(f"      its graphs ran {plural(calls, 'time')}")
        if frt and frt.get("share") is not None and frt["samples"]:
            out.append(f"      step time: {frt['share']:.0%} in its graphs, {frt['glue_share']:.0%} in its eager code")
        for reason in f["recompile_reasons"][:5]:
            version, why = split_reason(reason.splitlines()[0])
            out.append(f"      recompiled: {cut(why, 160)}" + (f" (a guard of {version} failed)" if version else ""))
        if len(f["recompile_reasons"]) > 5:
            out.append(f"      … and {len(f['recompile_reasons']) - 5} more reasons")
    return out


def _refused(r: Report, frame: Frame) -> int:
    """The frame's attempts the recompile limit refused (the report lists
    the first 1,000 compiles; past them, a frame that hit the limit had one)."""
    if not frame.get("limit_hit"):
        return 0
    fid = frame.get("frame_id")
    n = sum(1 for c in r.get("compiles") or [] if c.get("frame_id") == fid and is_limit_hit(None, c.get("failed")))
    return n or 1


def breaks_section(r: Report, cwd: str | None) -> list[str]:
    gbs = r.get("graph_breaks") or []
    if not gbs:
        return []
    return ["", "Graph breaks"] + [
        f"  {where(b['file'], b['line'], cwd)}  ×{b['count']}  {b['reason']}{lead(b, cwd)}" for b in gbs
    ]


def system_section(sysr: System | None) -> list[str]:
    if not sysr or not sysr.get("samples"):
        return []
    out = ["", "System"]
    for g in sysr["gpus"]:
        peak, job_peak = g["memory_peak_bytes"], g["job_memory_peak_bytes"]
        mem = gib_or_mib(peak) if peak else "?"
        job = f" (the job's own {gib_or_mib(job_peak)})" if job_peak else ""
        idle = g["idle_share_while_stepping"]
        text = (
            f"GPU {g['index']} {g['name'] or ''}: utilisation mean {g['util_mean']}%, p10 {g['util_p10']}%, "
            f"p90 {g['util_p90']}%; memory peak {mem}{job}"
            + (f"; power {g['power_mean_w']:.0f} W" if g["power_mean_w"] is not None else "")
            + (f"; idle {idle:.0%} of the time steps ran" if idle is not None else "")
        )
        out.append(wrap(text, "  ", "    "))
    if not sysr["gpus"]:
        out.append(f"  no GPU figures: {sysr['no_gpu']}")
    cpu = sysr["cpu_percent_peak"]
    if cpu is not None:
        rss_peak = sysr.get("rss_peak_bytes")
        cores = f" of {sysr['cpus']} cores" if sysr.get("cpus") else ""
        rss = f", RSS peak {gib_or_mib(rss_peak)}" if rss_peak else ""
        out.append(f"  CPU mean {sysr['cpu_percent_mean']}%, peak {cpu}%{cores}{rss}")
    return out


def caches_section(r: Report) -> list[str]:
    cache: Cache = r["cache"]
    out = ["", "Caches"]
    for name, label in CACHE_NAMES.items():
        cc = cache_results(cache, name)
        out.append(f"  {label:<12} {cc.get('hit', 0)} hit  {cc.get('miss', 0)} miss  {cc.get('bypass', 0)} bypass")
    at = cache.get("autotune")
    if at and at.get("kernels"):
        out.append(f"  {'Autotune':<12} {at['kernels']} kernels, {at['cached']} from cache")
    for b in cache.get("bypass_reasons") or []:
        out.append(f"  bypass ×{b['count']}: {cut(b['reason'], 160)}")
    cudagraphs = r.get("cudagraphs")
    for sk in (cudagraphs.get("skips") if cudagraphs else None) or []:
        out.append(f"  cudagraphs skipped ×{sk['count']}: {cut(sk['reason'], 160)}")
    return out


def drops_and_notes(r: Report) -> list[str]:
    out = []
    drops: Mapping[str, int] = r.get("drops") or {}
    if drops.get("steps") or drops.get("events"):
        out += ["", f"Dropped: {drops.get('steps', 0)} step boundaries, {drops.get('events', 0)} events"]
    said = warning_notes(r)
    if said:
        out += ["", "Notes"]
        out.extend(wrap(f"{n['level']}: {n['message']}", "  ", "    ") for n in said[:NOTES_SHOWN])
        if len(said) > NOTES_SHOWN:
            out.append(f"  … {len(said) - NOTES_SHOWN} more (report --json: notes)")
    return out
