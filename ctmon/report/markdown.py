"""The report as Markdown, fit for a pull-request comment (and printed to a
terminal first: recorded strings are cleaned as in the text report)."""

from __future__ import annotations

import re
from typing import cast

from ctmon.report.model import CompileTotals, Finding, MarkedFinding, Report, StepRuntime, System, steps_of
from ctmon.report.sentences import NOTES_SHOWN, generation_text, rank_lines, warning_notes
from ctmon.report.text import ended_text, exit_text
from ctmon.words.locations import where
from ctmon.words.phrases import cut
from ctmon.words.textsafe import clean, clean_tree
from ctmon.words.units import ms_or_s, seconds

SEVERITY_LABEL = {"critical": "CRITICAL", "warning": "warning", "info": "info"}


def _system(sysr: System) -> str:
    parts = [
        f"GPU {g['index']}: utilisation mean {g['util_mean']}%, memory peak {(g['memory_peak_bytes'] or 0) / 2**30:.1f} GiB"
        for g in sysr["gpus"]
        if g.get("memory_peak_bytes")
    ]
    if not sysr["gpus"]:
        parts.append(f"no GPU figures: {sysr['no_gpu']}")  # its reason may hold brackets of its own
    if sysr.get("cpu_percent_peak") is not None:
        parts.append(f"CPU peak {sysr['cpu_percent_peak']}%")
    return "; ".join(parts)


def _compiles(c: CompileTotals) -> str:
    """``8 (7 recompiles) + 1 refused at the recompile limit, 1.20 s``: as the text report says them."""
    refused = c["limit_hits"]
    compiled, recompiled = max(0, c["compiles"] - refused), max(0, c["recompiles"] - refused)
    limit = f" + {refused} refused at the recompile limit" if refused else ""
    return f"{compiled} ({recompiled} recompiles){limit}, {seconds(c['total_time_s'])}"


def _shares(rt: StepRuntime) -> str:
    return (
        f"{rt['graph_share']:.0%} compiled graphs, {rt['glue_share']:.0%} eager code between graphs, "
        f"{rt['other_share']:.0%} elsewhere"
    )


def _where(file: str | None, line: int | None, cwd: str | None) -> str:
    return f"`{where(file, line, cwd)}`" if file else ""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


# Findings' text as Markdown a CommonMark renderer (GitHub's too) shows as
# meant: the code spans it already has stay code, links become clickable
# (<url>; a link inside a code span is not, so it is taken out of it), and
# everything else is escaped, never wrapped whole in backticks.
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_URL = re.compile(r"https?://[^\s<>`]*[^\s<>`.,;:)\]'\"]")
_SPECIAL = re.compile(r"([\\*_\[\]<>#|~])")


def inline(text: str, limit: int | None = None) -> str:
    text = " ".join(text.split("\n"))
    if limit is not None:
        text = cut(text, limit)
    out, pos = [], 0
    for m in _CODE_SPAN.finditer(text):
        out.append(_plain(text[pos : m.start()]))
        body = m.group(2)
        out.append(_plain(body) if _URL.search(body) else code(body))
        pos = m.end()
    out.append(_plain(text[pos:]))
    return "".join(out)


def _plain(text: str) -> str:
    out, pos = [], 0
    for m in _URL.finditer(text):
        out.append(_SPECIAL.sub(r"\\\1", text[pos : m.start()]))
        out.append(f"<{m.group(0)}>")
        pos = m.end()
    out.append(_SPECIAL.sub(r"\\\1", text[pos:]))
    return "".join(out)


def code(text: str) -> str:
    """A code span holding ``text`` whatever backticks it has (CommonMark:
    a fence longer than any run inside, padded when it starts or ends with one)."""
    runs = [len(m.group(0)) for m in re.finditer(r"`+", text)]
    fence = "`" * (max(runs, default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _new_since(f: Finding, base: str | None) -> tuple[str, list[str]]:
    """A finding's mark new since BASE (``report --baseline``): after its
    title, and what is new at its place, one line each; none without it."""
    said = cast("MarkedFinding", f).get("new_since_base") if base is not None else None
    if not said:
        return "", []
    return f" **new since {inline(base or '')}**", [
        f"  - New since {inline(base or '')}: {inline(w, 300)}" for w in said
    ]


def markdown(report: Report, base: str | None = None) -> str:
    """The report as Markdown; ``base``: the baseline's name, for the
    findings new since it (their ``new_since_base``)."""
    r: Report = clean_tree(report)
    cwd = r.get("cwd")
    cmd = " ".join(r.get("command") or []) or "job"
    st, c, cache = steps_of(r), r["compile"], r["cache"]
    out = [
        f"### ctmon: {code(cmd)} {ended_text(r) if r.get('duration_s') else exit_text(r)}",
        "",
    ]
    fx, aot = cache.get("fx_graph") or {}, cache.get("aot_autograd") or {}
    generation, runtime, system = r.get("generation"), st.get("runtime"), r.get("system")
    rows = [
        (
            "Steps",
            f"{st['count']} ({st['source']}), p50 {ms_or_s(st['p50_ms'])}, p90 {ms_or_s(st['p90_ms'])}"
            if st["count"]
            else ("not in a PyTorch trace" if st["count"] is None else "no step boundaries"),
        ),
        *([("Generation", generation_text(generation))] if generation else []),
        *(
            [("Step time (host)" if runtime.get("graphs_timed") else "Step time (sampled)", _shares(runtime))]
            if runtime and runtime.get("graph_share") is not None
            else []
        ),
        *([("System", _system(system))] if system and system.get("samples") else []),
        ("Compiles", _compiles(c)),
        ("Graph breaks", f"{c['graph_breaks']} at {len(r.get('graph_breaks') or [])} site(s)"),
        ("Recompile-limit hits", str(c["limit_hits"])),
        ("FX graph cache", f"{fx.get('hit', 0)} hit, {fx.get('miss', 0)} miss, {fx.get('bypass', 0)} bypass"),
        ("AOTAutograd cache", f"{aot.get('hit', 0)} hit, {aot.get('miss', 0)} miss, {aot.get('bypass', 0)} bypass"),
    ]
    if r.get("ranks"):
        rows.insert(0, ("Ranks", f"{len(r['ranks'])}; compiles and caches summed over them"))
    out += ["| | |", "|---|---|"] + [f"| {k} | {_cell(v)} |" for k, v in rows] + [""]
    if r.get("ranks"):
        out += ["<details><summary>Ranks</summary>", ""] + [f"- {_cell(x)}" for x in rank_lines(r["ranks"])]
        out += ["</details>", ""]
    findings = [f for f in r.get("findings") or [] if f.get("severity") in ("critical", "warning")]
    infos = [f for f in r.get("findings") or [] if f.get("severity") == "info"]
    if findings:
        out += [f"#### Findings ({len(findings)})", ""]
        for f in findings:
            at = _where(f.get("file"), f.get("line"), cwd)
            called = f.get("called_from")
            if called and called.get("file"):  # the user's own line first: the library's place is where it led
                at = (
                    f"{_where(called['file'], called.get('line'), cwd)} → {at}"
                    if at
                    else _where(called["file"], called.get("line"), cwd)
                )
            mark, news = _new_since(f, base)
            out.append(f"- **{SEVERITY_LABEL[f['severity']]}** {at + ' — ' if at else ''}{inline(f['title'])}{mark}")
            out += news
            if f.get("fix"):
                out.append(f"  - Fix: {inline(f['fix'])}")
            if f.get("evidence"):
                out.append("  <details><summary>Evidence</summary>")
                out.append("")
                out += [f"  - {inline(e, 300)}" for e in f["evidence"][:10]]
                out.append("  </details>")
        out.append("")
    else:
        out += ["No warnings: compilation looks healthy.", ""]
    said = warning_notes(r)
    if said:
        out += [f"#### ctmon noted ({len(said)})", ""]
        out += [f"- {n['level']}: {inline(n['message'], 500)}" for n in said[:NOTES_SHOWN]]
        out.append("")
    if infos:
        out.append("<details><summary>Notes</summary>")
        out.append("")
        out += [f"- {inline(f['title'])}{_new_since(f, base)[0]}" for f in infos]
        out.append("</details>")
        out.append("")
    return clean("\n".join(out))
