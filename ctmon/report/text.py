"""Human-readable renderings of a report dict (plain text, no colour codes).

Both go to a terminal: every recorded string in them is cleaned of control
characters and escape sequences (ctmon.words.textsafe), before wrapping and again
over the finished text.
"""

from __future__ import annotations

import textwrap
from typing import Any

from ctmon.store.compiles import is_limit_hit, split_reason
from ctmon.store.joined import FRAMES_SHOWN, from_report
from ctmon.store.session import CUT_OFF
from ctmon.words import locations
from ctmon.words.labels import CACHE_NAMES, PHASE_NAMES
from ctmon.words.phrases import cut, plural
from ctmon.words.textsafe import clean, clean_tree
from ctmon.words.units import gib_or_mib, ms_or_s, seconds

SUMMARY_FINDINGS = 3  # warnings and criticals in the end-of-run summary; the rest are counted


def compile_counts_text(compiles: int, recompiles: int, limit_hits: int, limit: int | None = None) -> str:
    """``8 compiles, 7 recompiles + 1 refused at the recompile limit``: an
    attempt the limit refused compiled nothing, so it is said apart (the
    report's ``compiles`` and ``recompiles`` count attempts, refused ones
    included: every refusal is of a recompile)."""
    of = f" ({limit})" if limit else ""
    if not limit_hits:
        return f"{plural(compiles, 'compile')}, {plural(recompiles, 'recompile')}"
    return (
        f"{plural(max(0, compiles - limit_hits), 'compile')}, {plural(max(0, recompiles - limit_hits), 'recompile')}"
        f" + {limit_hits:,} refused at the recompile limit{of}"
    )


def _counts(c: dict[str, Any], limit: bool = False) -> str:
    counts = compile_counts_text(
        c["compiles"], c["recompiles"], c["limit_hits"], c.get("recompile_limit") if limit else None
    )
    hits = "" if c["limit_hits"] else f", {plural(0, 'recompile-limit hit')}"
    return f"{counts}, {plural(c['graph_breaks'], 'graph break')}{hits}"


def _wrap(text: str, first: str, rest: str, width: int = 100) -> str:
    return "\n".join(textwrap.wrap(text, width, initial_indent=first, subsequent_indent=rest)) or first.rstrip()


def generation_text(g: dict[str, Any]) -> str:
    """One line on the job's generate() calls (report key ``generation``)."""
    calls = g["calls"]
    ttft = (
        f"first token {ms_or_s(g['ttft_ms'])}"
        if g.get("ttft_ms") is not None
        else "first token not timed (needs Python 3.12+)"
    )
    if g.get("ttft_ms") is not None and calls > 1:
        ttft = f"first token p50 {ms_or_s(g['ttft_ms'])} (max {ms_or_s(g['ttft_max_ms'])})"
    per_token = (
        f"per token p50 {ms_or_s(g['token_p50_ms'])}, p90 {ms_or_s(g['token_p90_ms'])}"
        if g.get("token_p50_ms") is not None
        else "per-token latency not known"
    )
    return (
        f"{calls} generate() call{'s' if calls != 1 else ''}, {g['tokens']} token{'s' if g['tokens'] != 1 else ''} "
        f"(prefill {g['prefill']}): {ttft}; {per_token}"
    )


def where(file: str | None, line: int | None, cwd: str | None = None) -> str:
    return locations.where(file, line, cwd)


def _lead(item: dict[str, Any], cwd: str | None) -> str:
    """`` (called from train.py:42)`` after a place in a library's code."""
    text = locations.called_from_text(item.get("called_from"), cwd)
    return f" ({text})" if text else ""


def exit_text(r: dict[str, Any]) -> str:
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


def ended_text(r: dict[str, Any]) -> str:
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


# where the job's own step numbers came from, by the step source that carried them
NUMBERED_BY = {"optimizer": "its optimizer's step count", "api": "ctmon.step(n)"}


def numbering_text(st: dict[str, Any]) -> str:
    """``step numbers 1–240, counted by ctmon from 1``: which numbering the
    findings' "step N" use (report key ``steps.numbers``)."""
    nums = st["numbers"]
    span = f"{nums['first']}–{nums['last']}" if nums["last"] != nums["first"] else f"{nums['first']}"
    if nums["by"] == "job":
        return f"step numbers {span}, the job's own ({NUMBERED_BY.get(st.get('source') or '', 'its own count')})"
    return f"step numbers {span}, counted by ctmon from 1"


def first_step_text(st: dict[str, Any]) -> str | None:
    """What the figures leave out: the first step, which only a compiled
    call's start can time where an optimizer or ctmon.step() ends the steps."""
    nums = st.get("numbers")
    if not nums or st.get("source") == "compiled_call":
        return None  # its first interval is the first step's: in the figures
    first = nums["first"]
    if st.get("first_step_ms") is None:
        return f"step {first}, the first, is untimed (nothing marked its start) and not in the figures below"
    return (
        f"step {first}, the first, took {ms_or_s(st['first_step_ms'])} from the first compiled call's start "
        "(its compiles included; not in the figures below)"
    )


def summary_lines(r: dict[str, Any], recording: str | None = None) -> list[str]:
    """The few lines `ctmon record` prints after the job's own output."""
    r = clean_tree(r)
    name = " ".join(r.get("command") or []) or "job"
    st, c, cache = r["steps"], r["compile"], r["cache"]
    lines = [f"ctmon: {name} {ended_text(r)}"]
    if st["count"]:
        timing = "device-timed" if st.get("device_timed") else "host-timed"
        timed = st.get("timed")
        if timed is not None and timed < 0.9 * (st["count"] - 1):
            timing += f", from {timed:,} timed"  # a fast loop's counting stretches (docs/REPORT.md)
        lines.append(
            f"ctmon: {st['count']} steps ({st['source']}): p50 {ms_or_s(st['p50_ms'])}, "
            f"p90 {ms_or_s(st['p90_ms'])}, max {ms_or_s(st['max_ms'])} ({timing}){_one_rank(r)}"
        )
    if r.get("generation"):
        lines.append(f"ctmon: {generation_text(r['generation'])}")
    lines.append(f"ctmon: {_counts(c)}, {seconds(c['total_time_s'])} compiling{_all_ranks(r)}")
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


def joined_section(joined: dict[str, Any], cwd: str | None) -> list[str]:
    """--pid: what Dynamo had done before ctmon joined, said as that (ctmon
    saw none of it happen: every count below the section is from the join on)."""
    before = from_report(joined)
    lines = ["", "Before ctmon joined (read from PyTorch's own state; not counted below)"]
    lines.append(_wrap(before.summary().removeprefix("before ctmon joined: "), "  ", "    "))
    for f in before.frames[:FRAMES_SHOWN]:
        label = f"{where(f.file, f.line, cwd)} {f.name}"
        if f.modules:
            label += f" (torch.compile of {', '.join(f.modules)})"
        lines.append(_wrap(f"{label}: {f.versions} compiled version(s)", "  - ", "    "))
    more = before.frame_count - min(len(before.frames), FRAMES_SHOWN)
    if more > 0:
        lines.append(f"  - and {more} more")
    return lines


def full_text(r: dict[str, Any]) -> str:
    r = clean_tree(r)
    cwd = r.get("cwd")
    out: list[str] = []
    add = out.append
    name = " ".join(r.get("command") or []) or "job"
    add(f"ctmon report — {name}")
    ended = ended_text(r)
    add(f"  {ended[:1].upper()}{ended[1:]}")
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
        add(f"  {env}")
    for d in r.get("devices") or []:
        add(f"  GPU {d.get('index')}: {d.get('name')}")
    if isinstance(r.get("joined"), dict):
        out.extend(joined_section(r["joined"], cwd))
    findings = r.get("findings") or []
    if findings:
        add("")
        add(f"Findings ({len(findings)})")
        for f in findings:
            add(f"  [{f['severity']}] {f['title']}")
            called = f.get("called_from")
            if called and called.get("file"):  # the user's own line first, then the library's
                add(
                    f"      {locations.called_from_text(called, cwd)}"
                    + (f": {called['code']}" if called.get("code") else "")
                )
            if f.get("file"):
                add(f"      at {where(f.get('file'), f.get('line'), cwd)}")
            for e in (f.get("evidence") or [])[:4]:
                add(_wrap(e, "      - ", "        "))
            if f.get("fix"):
                add(_wrap(str(f["fix"]), "      fix: ", "           "))
    st = r["steps"]
    add("")
    add("Steps")
    if st["count"] is None:
        add("  not in a PyTorch trace (step times, samples and output need a recording: ctmon record)")
    elif st["count"]:
        add(
            f"  {st['count']} steps from {st['source']}"
            + (" (device-timed with CUDA events)" if st.get("device_timed") else "")
        )
        if st.get("numbers"):
            add(f"  {numbering_text(st)}")
        first = first_step_text(st)
        if first:
            add(f"  {first}")
        add(
            f"  p50 {ms_or_s(st['p50_ms'])}  p90 {ms_or_s(st['p90_ms'])}  p99 {ms_or_s(st['p99_ms'])}  "
            f"mean {ms_or_s(st['mean_ms'])}  max {ms_or_s(st['max_ms'])}"
        )
        if st.get("compile_steps"):
            add(f"  {st['compile_steps']} step(s) paid for a compile")
        rt = st.get("runtime")
        if rt and rt.get("graph_share") is not None:
            how = "host; graphs timed, the rest sampled" if rt.get("graphs_timed") else "sampled, host"
            text = (
                f"step time ({how}): {rt['graph_share']:.0%} in compiled graphs, "
                f"{rt['glue_share']:.0%} in compiled frames' eager code between graphs, "
                f"{rt['other_share']:.0%} elsewhere ({rt['samples']} samples)"
            )
            add(_wrap(text, "  ", "    "))
        if r.get("generation"):
            add(_wrap(generation_text(r["generation"]), "  ", "    "))
    else:
        add("  no step boundaries seen (no optimizer.step(), no compiled model calls, no ctmon.step())")
    ranks = r.get("ranks") or []
    if ranks:
        add("")
        add(f"Ranks ({len(ranks)}; totals below are their sums, the other sections show rank {_primary(ranks)})")
        for line in rank_lines(ranks):
            add(f"  {line}")
    c = r["compile"]
    add("")
    add(f"Compilation{_all_ranks(r, ' (', ')')}")
    limit = f" of limit {c['recompile_limit']}" if c.get("recompile_limit") and not c["limit_hits"] else ""
    add(f"  {_counts(c, limit=True)}{limit}, {plural(c['failures'], 'failure')}")
    add(
        f"  {seconds(c['total_time_s'])} compiling ({seconds(c['forward_time_s'])} frames + "
        f"{seconds(c['backward_time_s'])} backward graphs)"
    )
    ph = c.get("phases_s") or {}
    if ph.get("backend"):
        add(
            f"  frames: Dynamo {seconds(ph['dynamo'])}, backend {seconds(ph['backend'])} "
            f"(Inductor {seconds(ph['inductor'])}, of it code generation {seconds(ph['code_gen'])})"
        )
    traced = c.get("traced_phases_s") or {}
    if traced:
        add("  PyTorch's phase timers (nested: Inductor runs inside AOTAutograd or a backward graph's compile):")
        add("    " + ", ".join(f"{PHASE_NAMES.get(k, k)} {seconds(v)}" for k, v in traced.items()))
    sites = r.get("compile_sites") or []
    if len(sites) > 0:
        add("")
        add("Where compiles began (your line → compile ids)")
        for site in sites[:8]:
            ids = site["compile_ids"]
            shown = ", ".join(ids[:6]) + (f", … {len(ids) - 6} more" if len(ids) > 6 else "")
            code = f"  `{site['code']}`" if site.get("code") else ""
            add(f"  {where(site['file'], site['line'], cwd)}{code}  → {shown}")
    specs = r.get("specializations") or []
    if specs:
        add("")
        add("Sizes Dynamo specialised to one value (a new value recompiles)")
        for x in specs[:8]:
            what = ", ".join(x["sources"][:2]) or "?"
            code = f"  `{x['code']}`" if x.get("code") else ""
            add(
                f"  {what} = {x['value']} at {where(x['file'], x['line'], cwd)}{code}  ({x['reason']}; {x['compile_id']})"
            )
        if len(specs) > 8:
            add(f"  … {len(specs) - 8} more (report --json: specializations)")
    frames = r.get("frames") or []
    if frames:
        add("")
        add("Frames")
        for f in frames:
            flag = "  LIMIT HIT, runs eager" if f["limit_hit"] else ""
            counts = compile_counts_text(f["compiles"], f["recompiles"], _refused(r, f))
            add(
                f"  {where(f['file'], f['line'], cwd)}  {f['name']}: {counts}, "
                f"{seconds(f['time_s'])}{flag}{_lead(f, cwd)}"
            )
            frt = f.get("runtime") or {}
            if frt.get("calls") is not None:
                add(f"      its graphs ran {plural(frt['calls'], 'time')}")
            if frt.get("share") is not None and frt["samples"]:
                add(f"      step time: {frt['share']:.0%} in its graphs, {frt['glue_share']:.0%} in its eager code")
            for reason in f["recompile_reasons"][:5]:
                version, why = split_reason(reason.splitlines()[0])
                add(f"      recompiled: {cut(why, 160)}" + (f" (a guard of {version} failed)" if version else ""))
            if len(f["recompile_reasons"]) > 5:
                add(f"      … and {len(f['recompile_reasons']) - 5} more reasons")
    gbs = r.get("graph_breaks") or []
    if gbs:
        add("")
        add("Graph breaks")
        for b in gbs:
            add(f"  {where(b['file'], b['line'], cwd)}  ×{b['count']}  {b['reason']}{_lead(b, cwd)}")
    sysr = r.get("system")
    if sysr and sysr.get("samples"):
        add("")
        add("System")
        for g in sysr["gpus"]:
            mem = gib_or_mib(g["memory_peak_bytes"]) if g["memory_peak_bytes"] else "?"
            job = f" (the job's own {gib_or_mib(g['job_memory_peak_bytes'])})" if g["job_memory_peak_bytes"] else ""
            idle = g["idle_share_while_stepping"]
            text = (
                f"GPU {g['index']} {g['name'] or ''}: utilisation mean {g['util_mean']}%, p10 {g['util_p10']}%, "
                f"p90 {g['util_p90']}%; memory peak {mem}{job}"
                + (f"; power {g['power_mean_w']:.0f} W" if g["power_mean_w"] is not None else "")
                + (f"; idle {idle:.0%} of the time steps ran" if idle is not None else "")
            )
            add(_wrap(text, "  ", "    "))
        if not sysr["gpus"]:
            add(f"  no GPU figures: {sysr['no_gpu']}")
        cpu = sysr["cpu_percent_peak"]
        if cpu is not None:
            cores = f" of {sysr['cpus']} cores" if sysr.get("cpus") else ""
            rss = f", RSS peak {gib_or_mib(sysr['rss_peak_bytes'])}" if sysr.get("rss_peak_bytes") else ""
            add(f"  CPU mean {sysr['cpu_percent_mean']}%, peak {cpu}%{cores}{rss}")
    cache = r["cache"]
    add("")
    add("Caches")
    for name, label in CACHE_NAMES.items():
        cc = cache.get(name) or {}
        add(f"  {label:<12} {cc.get('hit', 0)} hit  {cc.get('miss', 0)} miss  {cc.get('bypass', 0)} bypass")
    at = cache.get("autotune") or {}
    if at.get("kernels"):
        add(f"  {'Autotune':<12} {at['kernels']} kernels, {at['cached']} from cache")
    for b in cache.get("bypass_reasons") or []:
        add(f"  bypass ×{b['count']}: {cut(b['reason'], 160)}")
    skips = (r.get("cudagraphs") or {}).get("skips") or []
    for sk in skips:
        add(f"  cudagraphs skipped ×{sk['count']}: {cut(sk['reason'], 160)}")
    drops = r.get("drops") or {}
    if drops.get("steps") or drops.get("events"):
        add("")
        add(f"Dropped: {drops.get('steps', 0)} step boundaries, {drops.get('events', 0)} events")
    said = warning_notes(r)
    if said:
        add("")
        add("Notes")
        out.extend(_wrap(f"{n['level']}: {n['message']}", "  ", "    ") for n in said[:NOTES_SHOWN])
        if len(said) > NOTES_SHOWN:
            add(f"  … {len(said) - NOTES_SHOWN} more (report --json: notes)")
    return clean("\n".join(out) + "\n")


NOTES_SHOWN = 20


def _refused(r: dict[str, Any], frame: dict[str, Any]) -> int:
    """The frame's attempts the recompile limit refused (the report lists
    the first 1,000 compiles; past them, a frame that hit the limit had one)."""
    if not frame.get("limit_hit"):
        return 0
    fid = frame.get("frame_id")
    n = sum(1 for c in r.get("compiles") or [] if c.get("frame_id") == fid and is_limit_hit(None, c.get("failed")))
    return n or 1


def warning_notes(r: dict[str, Any]) -> list[dict[str, Any]]:
    """What ctmon or the agent warned about during the run (a rank that exec'd
    away, events lost, a hook disabled): the notes a reader must see. Not
    Dynamo's own errors (a failed attempt's traceback): the findings say
    what they mean."""
    return [
        n
        for n in r.get("notes") or []
        if n.get("level") in ("warning", "error") and n.get("message") and n.get("source") != "dynamo"
    ]


def _all_ranks(r: dict[str, Any], before: str = ", ", after: str = "") -> str:
    """The scope of a job-wide total in a job of several ranks."""
    ranks = r.get("ranks") or []
    return f"{before}summed over {len(ranks)} ranks{after}" if len(ranks) >= 2 else ""


def _one_rank(r: dict[str, Any]) -> str:
    """The scope of a figure read from the primary rank's store."""
    ranks = r.get("ranks") or []
    return f", on rank {_primary(ranks)}" if len(ranks) >= 2 else ""


def _primary(ranks: list[dict[str, Any]]) -> str:
    return next((str(x["rank"]) for x in ranks if x.get("primary")), "?")


def rank_lines(ranks: list[dict[str, Any]]) -> list[str]:
    """One line per rank, the slowest (by median step) marked."""
    p50s = {x["rank"]: x["steps"].get("p50_ms") for x in ranks if x["steps"].get("p50_ms") is not None}
    slowest = max(p50s, key=lambda k: p50s[k]) if len(p50s) > 1 else None
    if slowest is not None and p50s[slowest] <= 1.1 * min(p50s.values()):
        slowest = None  # within 10 % of the fastest: none stands out
    out = []
    for x in ranks:
        st, c = x["steps"], x["compile"]
        fx = (x.get("cache") or {}).get("fx_graph") or {}
        # a PyTorch trace holds no steps: its count is None (absent), said as such, not as 0
        steps = "steps not traced" if st["count"] is None else plural(st["count"], "step")
        steps += f", p50 {ms_or_s(st['p50_ms'])}" if st.get("p50_ms") is not None else ""
        who = ", ".join(p for p in (x.get("host"), f"pid {x['pid']}" if x.get("pid") is not None else None) if p)
        out.append(
            f"rank {x['rank']}"
            + (f" ({who})" if who else "")
            + f": {steps}; {compile_counts_text(c['compiles'], c['recompiles'], c.get('limit_hits') or 0)}, "
            f"{plural(c['graph_breaks'], 'break')}; "
            f"FX cache {fx.get('hit', 0)} hit / {fx.get('miss', 0)} miss"
            + (
                f"; exit {x['exit_code']}" + (f" ({x['exit_signal']})" if x.get("exit_signal") else "")
                if x.get("exit_code") is not None
                else ""
            )
            + ("  ← slowest" if x["rank"] == slowest else "")
        )
    return out
