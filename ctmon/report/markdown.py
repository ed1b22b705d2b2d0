"""The report as Markdown, fit for a pull-request comment (and printed to a
terminal first: recorded strings are cleaned as in the text report)."""

from __future__ import annotations

from typing import Any

from ctmon.locations import where
from ctmon.report.text import NOTES_SHOWN, exit_text, fmt_ms, fmt_s, generation_text, rank_lines, warning_notes
from ctmon.textsafe import clean, clean_tree

SEVERITY_LABEL = {"critical": "CRITICAL", "warning": "warning", "info": "info"}


def _system(sysr: dict[str, Any]) -> str:
    parts = [
        f"GPU {g['index']}: utilisation mean {g['util_mean']}%, memory peak {g['memory_peak_bytes'] / 2**30:.1f} GiB"
        for g in sysr["gpus"]
        if g.get("memory_peak_bytes")
    ]
    if not sysr["gpus"]:
        parts.append(f"no GPU figures ({sysr['no_gpu']})")
    if sysr.get("cpu_percent_peak") is not None:
        parts.append(f"CPU peak {sysr['cpu_percent_peak']}%")
    return "; ".join(parts)


def _shares(rt: dict[str, Any]) -> str:
    return (
        f"{rt['graph_share']:.0%} compiled graphs, {rt['glue_share']:.0%} eager code between graphs, "
        f"{rt['other_share']:.0%} elsewhere"
    )


def _where(file: str | None, line: int | None, cwd: str | None) -> str:
    return f"`{where(file, line, cwd)}`" if file else ""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(r: dict[str, Any]) -> str:
    r = clean_tree(r)
    cwd = r.get("cwd")
    cmd = " ".join(r.get("command") or []) or "job"
    st, c, cache = r["steps"], r["compile"], r["cache"]
    out = [
        f"### ctmon: `{cmd}` {exit_text(r)}" + (f" after {fmt_s(r['duration_s'])}" if r.get("duration_s") else ""),
        "",
    ]
    fx, aot = cache.get("fx_graph") or {}, cache.get("aot_autograd") or {}
    rows = [
        (
            "Steps",
            f"{st['count']} ({st['source']}), p50 {fmt_ms(st['p50_ms'])}, p90 {fmt_ms(st['p90_ms'])}"
            if st["count"]
            else ("not in a PyTorch trace" if st["count"] is None else "no step boundaries"),
        ),
        *([("Generation", generation_text(r["generation"]))] if r.get("generation") else []),
        *(
            [("Step time (sampled)", _shares(st["runtime"]))]
            if (st.get("runtime") or {}).get("graph_share") is not None
            else []
        ),
        *([("System", _system(r["system"]))] if (r.get("system") or {}).get("samples") else []),
        ("Compiles", f"{c['compiles']} ({c['recompiles']} recompiles), {fmt_s(c['total_time_s'])}"),
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
            called = f.get("called_from") or {}
            if called.get("file"):  # the user's own line first: the library's place is where it led
                at = (
                    f"{_where(called['file'], called.get('line'), cwd)} → {at}"
                    if at
                    else _where(called["file"], called.get("line"), cwd)
                )
            out.append(f"- **{SEVERITY_LABEL[f['severity']]}** {at + ' — ' if at else ''}{f['title']}")
            if f.get("fix"):
                out.append(f"  - Fix: {f['fix']}")
            if f.get("evidence"):
                out.append("  <details><summary>Evidence</summary>")
                out.append("")
                out += [f"  - `{_cell(e)[:300]}`" for e in f["evidence"][:10]]
                out.append("  </details>")
        out.append("")
    else:
        out += ["No warnings: compilation looks healthy.", ""]
    said = warning_notes(r)
    if said:
        out += [f"#### ctmon noted ({len(said)})", ""]
        out += [f"- {n['level']}: {_cell(n['message'])[:500]}" for n in said[:NOTES_SHOWN]]
        out.append("")
    if infos:
        out.append("<details><summary>Notes</summary>")
        out.append("")
        out += [f"- {f['title']}" for f in infos]
        out.append("</details>")
        out.append("")
    return clean("\n".join(out))
