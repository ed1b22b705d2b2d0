"""``ctmon bench``'s table, as text for the terminal and as Markdown: the
rows ctmon/report/bench.py computes, the verdict and how it was measured."""

from __future__ import annotations

import re
from typing import Any

COLUMNS = (
    ("mode", "mode"),
    ("compile", "compile_s"),
    ("warm", "warm_compile_s"),
    ("1st step", "first_step_s"),
    ("p50", "p50_ms"),
    ("p90", "p90_ms"),
    ("speed-up", "speedup"),
    ("95 % CI", "speedup_ci"),
    ("runs", "runs"),
    ("GPU mem", "peak_mem_bytes"),
    ("recomp", "recompiles"),
    ("breaks", "graph_breaks"),
    ("cg skips", "cudagraph_skips"),
    ("break-even", "break_even_steps"),
)


def _cell(key: str, v: Any) -> str:
    if v is None:
        return "—"
    if key in ("compile_s", "warm_compile_s", "first_step_s"):
        return f"{v:.1f} s"
    if key in ("p50_ms", "p90_ms"):
        return f"{v:.3g} ms"
    if key == "speedup":
        return f"{v:.2f}×"
    if key == "speedup_ci":
        return f"{v[0]:.2f}–{v[1]:.2f}×"
    if key in ("peak_mem_bytes", "rss_peak_bytes"):
        return f"{v / 2**30:.2f} GiB"
    if key == "break_even_steps":
        return f"{v:,} steps"
    return str(v)


def table_rows(doc: dict[str, Any]) -> tuple[list[str], list[list[str]], list[str]]:
    """Header, one row of cells per mode, and the notes under the table
    (failures and stops, one line each)."""
    warm = any(r.get("warm_compile_s") is not None for r in doc["modes"])
    cols = [(h, k) for h, k in COLUMNS if warm or k != "warm_compile_s"]
    if not any(r.get("peak_mem_bytes") for r in doc["modes"]):  # no GPU: the host's memory instead
        cols = [("host mem", "rss_peak_bytes") if k == "peak_mem_bytes" else (h, k) for h, k in cols]
    body, notes = [], []
    for r in doc["modes"]:
        if r["status"] in ("failed", "no-compile", "no-steps"):
            body.append([r["mode"], r["status"]] + [""] * (len(cols) - 2))
            notes.append(f"{r['mode']}: {r.get('error')}")
            continue
        body.append([_cell(k, r.get(k)) for _, k in cols])
        if r.get("tried"):
            notes.append(f"{r['mode']}: default with {r['tried']}, against the unchanged default row")
        notes += [f"{r['mode']}: {_plain(n, r['mode'])}" for n in r.get("notes") or [] if "eager (" not in n]
        if r["status"] == "time-limit" and not r.get("steps"):
            notes.append(  # on a loaded machine, start-up alone (importing torch) can take that long
                f"{r['mode']}: stopped at the time limit ({doc.get('time_limit_s', 0):g} s) before its first step: "
                "give it more time with --time-limit"
            )
        elif r["status"] == "time-limit" and r.get("p50_ms") is None:
            notes.append(
                f"{r['mode']}: stopped at the time limit ({doc.get('time_limit_s', 0):g} s) before any steady "
                f"step ({r.get('steps', 0)} step(s) while compiling): give it more time with --time-limit"
            )
        elif r["status"] == "time-limit":
            notes.append(f"{r['mode']}: stopped at the time limit; its figures cover the steps it ran")
        elif r["status"] == "interrupted":
            notes.append(f"{r['mode']}: interrupted; its figures cover the steps it ran")
    return [h for h, _ in cols], body, notes


def _plain(note: str, mode: str) -> str:
    """An agent's bench note without its prefix: the table names the mode
    (the try row's notes name the mode it ran in, default)."""
    return re.sub(r"^ctmon bench \([^)]*\): ", "", note)


def render_text(doc: dict[str, Any]) -> str:
    head, body, notes = table_rows(doc)
    widths = [max(len(x) for x in col) for col in zip(head, *body, strict=True)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(head, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in body]
    lines += [f"  {n}" for n in notes]
    rec = doc["recommendation"]
    lines.append("")
    lines.append(f"recommendation: {rec['reason']}" if rec.get("mode") else f"no recommendation: {rec['reason']}")
    lines.append(_method(doc))
    return "\n".join(lines) + "\n"


def _method(doc: dict[str, Any]) -> str:
    """How the figures were made, one paragraph: steps, runs, noise, caches."""
    timing = "device-timed (CUDA events)" if doc.get("device_timed") else "host-timed"
    spread = (doc["recommendation"].get("noise") or {}).get("spread_pct")
    noise = f"±{spread:.1f} %" if spread is not None else "not measured (fewer than 2 eager runs)"
    return (
        f"steady steps are those after the last compile; {timing}; p50 is the median of the runs' medians, "
        f"runs interleaved in shuffled order; machine noise (spread of eager runs): {noise}; each mode's first "
        "run compiled on a fresh cache of its own (the compile column), its later runs reused it"
    )


def render_markdown(doc: dict[str, Any]) -> str:
    head, body, notes = table_rows(doc)
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in body]
    out.append("")
    out += [f"- {n}" for n in notes]
    rec = doc["recommendation"]
    out.append(f"**Recommendation:** {rec['reason']}" if rec.get("mode") else f"No recommendation: {rec['reason']}")
    out.append("")
    out.append(_method(doc))
    return "\n".join(out) + "\n"
