"""``ctmon diff`` as text (the terminal) and Markdown (a pull-request
comment). Recorded strings (reasons, paths) are cleaned for the terminal
first, as in the report."""

from __future__ import annotations

import os

from ctmon.report.diff import is_new_since_base
from ctmon.report.diff_model import DiffDoc, DiffEntry, Side
from ctmon.report.markdown import inline
from ctmon.words.phrases import plural
from ctmon.words.textsafe import clean_tree

SHOWN = 40  # entries listed per section; the rest are counted (--json has all)


def _side_line(side: Side) -> str:
    name = os.path.basename(str(side.get("path") or "?"))
    kind = "TORCH_TRACE" if side.get("input") == "torch_trace" else "recording"
    command = " ".join(side.get("command") or []) or "command not recorded"
    return f"{name} ({kind}): {command}"


def _counts_line(entries: list[DiffEntry]) -> str | None:
    """The changed totals in one line: each also appears, explained, in the
    entries above it."""
    counts = [e["what"] for e in entries if e["kind"] == "count"]
    return "totals: " + ", ".join(counts) if counts else None


def _listed(entries: list[DiffEntry]) -> list[str]:
    return [_what(e) for e in entries if e["kind"] != "count"]


def _what(e: DiffEntry) -> str:
    """An entry's line; a break, recompile or frame NEW has and BASE had not
    says so, as it reads in a report of NEW alone it would not."""
    return f"{e['what']} (new since BASE)" if is_new_since_base(e) else e["what"]


def _timed_unchanged(doc: DiffDoc) -> list[str]:
    """The timings that were compared and found within noise: the line
    says how it was decided."""
    return [e["what"] for e in doc["unchanged"] if e["kind"] in ("step_time", "gpu_memory") or _moved(e)]


def _moved(e: DiffEntry) -> bool:
    return e["kind"] == "compile_time" and e["base"] != e["new"] and "(" in e["what"]


def verdict(doc: DiffDoc) -> str:
    n = len(doc["regressions"])
    return f"REGRESSED: {plural(n, 'regression')}" if n else "no regression"


def render_text(raw: DiffDoc) -> str:
    doc: DiffDoc = clean_tree(raw)
    out = ["ctmon diff", f"  BASE  {_side_line(doc['base'])}", f"  NEW   {_side_line(doc['new'])}", ""]
    for entries, title in ((doc["regressions"], "regression"), (doc["improvements"], "improvement")):
        out.append(f"{plural(len(entries), title)}{':' if entries else ''}")
        out += _section(entries, "  ")
    changed = doc["changed"]
    if changed:
        out.append("changed (neither better nor worse):")
        out += [f"  {w}" for w in _listed(changed)[:SHOWN]]
    out.append(f"unchanged: {len(doc['unchanged'])} compared figures")
    out += [f"  {w}" for w in _timed_unchanged(doc)]
    out.append("")
    out.append("how timings were judged:")
    out += [f"  {k.replace('_', ' ')}: {v}" for k, v in doc["method"].items()]
    out.append("")
    out.append(verdict(doc))
    return "\n".join(out) + "\n"


def _section(entries: list[DiffEntry], indent: str) -> list[str]:
    listed = _listed(entries)
    lines = [f"{indent}{w}" for w in listed[:SHOWN]]
    if len(listed) > SHOWN:
        lines.append(f"{indent}… and {len(listed) - SHOWN} more (--json lists all)")
    totals = _counts_line(entries)
    if totals:
        lines.append(f"{indent}{totals}")
    return lines


def render_markdown(raw: DiffDoc) -> str:
    doc: DiffDoc = clean_tree(raw)
    out = [f"### ctmon diff: {inline(verdict(doc))}", ""]
    out.append(f"- **BASE** {inline(_side_line(doc['base']))}")
    out.append(f"- **NEW** {inline(_side_line(doc['new']))}")
    out.append("")
    for entries, title in ((doc["regressions"], "Regressions"), (doc["improvements"], "Improvements")):
        if not entries:
            continue
        out.append(f"**{title}** ({len(entries)})")
        out.append("")
        out += [f"- {inline(line.strip())}" for line in _section(entries, "")]
        out.append("")
    if doc["changed"]:
        out.append("**Changed** (neither better nor worse)")
        out.append("")
        out += [f"- {inline(w)}" for w in _listed(doc["changed"])[:SHOWN]]
        out.append("")
    timed = _timed_unchanged(doc)
    out.append(f"**Unchanged**: {len(doc['unchanged'])} compared figures" + (":" if timed else ""))
    if timed:
        out.append("")
        out += [f"- {inline(w)}" for w in timed]
    out.append("")
    out.append("<details><summary>How timings were judged</summary>")
    out.append("")
    out += [f"- {k.replace('_', ' ')}: {inline(v)}" for k, v in doc["method"].items()]
    out.append("")
    out.append("</details>")
    return "\n".join(out) + "\n"
