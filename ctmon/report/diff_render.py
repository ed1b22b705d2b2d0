"""``ctmon diff`` as text (the terminal) and Markdown (a pull-request
comment). Recorded strings (reasons, paths) are cleaned for the terminal
first, as in the report."""

from __future__ import annotations

import os

from ctmon.report.diff import is_new_since_base
from ctmon.report.diff_model import BenchDiffDoc, BenchEntry, DiffDoc, DiffEntry, Side
from ctmon.report.markdown import inline
from ctmon.words.phrases import plural
from ctmon.words.textsafe import clean_tree

SHOWN = 40  # entries listed per section; the rest are counted (--json has all)


def _side_line(side: Side) -> str:
    name = os.path.basename(str(side.get("path") or "?").rstrip("/"))
    kind = "TORCH_TRACE" if side.get("input") == "torch_trace" else "recording"
    if side.get("input") == "bench":
        kind = f"ctmon bench: {', '.join(side.get('modes') or [])}"
    elif len(side.get("paths") or []) > 1:
        kind = f"{len(side.get('paths') or [])} {'TORCH_TRACE directories' if kind == 'TORCH_TRACE' else 'recordings'}"
        kind += ", merged"
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
    out += _text_body(doc)
    out += _text_method(doc["method"])
    out.append(verdict(doc))
    return "\n".join(out) + "\n"


def _text_body(doc: DiffDoc, indent: str = "") -> list[str]:
    out: list[str] = []
    for entries, title in ((doc["regressions"], "regression"), (doc["improvements"], "improvement")):
        out.append(f"{indent}{plural(len(entries), title)}{':' if entries else ''}")
        out += _section(entries, indent + "  ")
    changed = doc["changed"]
    if changed:
        out.append(f"{indent}changed (neither better nor worse):")
        out += [f"{indent}  {w}" for w in _listed(changed)[:SHOWN]]
    out.append(f"{indent}unchanged: {len(doc['unchanged'])} compared figures")
    out += [f"{indent}  {w}" for w in _timed_unchanged(doc)]
    return out


def _text_method(method: dict[str, str]) -> list[str]:
    return ["", "how timings were judged:", *[f"  {k.replace('_', ' ')}: {v}" for k, v in method.items()], ""]


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
    out += _md_body(doc)
    out += _md_method(doc["method"])
    return "\n".join(out) + "\n"


def _md_body(doc: DiffDoc) -> list[str]:
    out: list[str] = []
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
    return out


def _md_method(method: dict[str, str]) -> list[str]:
    out = ["<details><summary>How timings were judged</summary>", ""]
    out += [f"- {k.replace('_', ' ')}: {inline(v)}" for k, v in method.items()]
    return [*out, "", "</details>"]


# -- two bench outputs, mode by mode


def bench_verdict(doc: BenchDiffDoc) -> str:
    n = len(doc["regressions"])
    if not n:
        return "no regression"
    modes = list(dict.fromkeys(e["mode"] for e in doc["regressions"]))
    return f"REGRESSED: {plural(n, 'regression')} (in {', '.join(modes)})"


def _bench_modes_line(doc: BenchDiffDoc) -> str:
    line = f"modes compared: {', '.join(doc['modes']) or 'none'}"
    if doc["only_base"]:
        line += f"; in BASE only: {', '.join(doc['only_base'])}"
    if doc["only_new"]:
        line += f"; in NEW only: {', '.join(doc['only_new'])}"
    unread = [f"{n['mode']} ({n['side'].upper()})" for n in doc["not_read"]]
    if unread:
        line += f"; not read: {', '.join(unread)}"
    return line


def _lost_modes(doc: BenchDiffDoc) -> list[BenchEntry]:
    """The regressions of no mode's diff: a mode NEW's run of which cannot be read."""
    return [e for e in doc["regressions"] if e["kind"] == "mode"]


def render_bench_text(raw: BenchDiffDoc) -> str:
    doc: BenchDiffDoc = clean_tree(raw)
    out = ["ctmon diff (ctmon bench outputs)", f"  BASE  {_side_line(doc['base'])}"]
    out += [f"  NEW   {_side_line(doc['new'])}", _bench_modes_line(doc), ""]
    out += [e["what"] for e in _lost_modes(doc)]
    for mode, one in doc["modes"].items():
        out += [f"── {mode}: {verdict(one)}", *_text_body(one, "  "), ""]
    out += _text_method(doc["method"])[1:]
    out.append(bench_verdict(doc))
    return "\n".join(out) + "\n"


def render_bench_markdown(raw: BenchDiffDoc) -> str:
    doc: BenchDiffDoc = clean_tree(raw)
    out = [f"### ctmon diff (bench): {inline(bench_verdict(doc))}", ""]
    out.append(f"- **BASE** {inline(_side_line(doc['base']))}")
    out.append(f"- **NEW** {inline(_side_line(doc['new']))}")
    out.append(f"- {inline(_bench_modes_line(doc))}")
    out += [f"- {inline(e['what'])}" for e in _lost_modes(doc)]
    out.append("")
    for mode, one in doc["modes"].items():
        out += [f"#### {inline(mode)}: {inline(verdict(one))}", ""]
        out += _md_body(one)
    out += _md_method(doc["method"])
    return "\n".join(out) + "\n"
