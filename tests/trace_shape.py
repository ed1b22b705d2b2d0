"""What PyTorch compiled, read from its own TORCH_TRACE: the parts that must
not change when ctmon watches the job.

helpers.read_torch_trace counts events; this keeps them, in order, keyed by
PyTorch's compile id, with the stacks Dynamo recorded when it started each
compile, so two runs of one script can be compared record by record.
"""

from __future__ import annotations

import glob
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

BREAK_SITE = re.compile(r"Graph break in user code at (\S+):(\d+)")


@dataclass(frozen=True)
class Compile:
    compile_id: str
    co_name: str
    co_filename: str
    co_firstlineno: int
    fail_type: str | None
    fail_reason: str | None
    recompile_reason: str | None
    restart_reasons: tuple[str, ...]
    graph_op_count: int | None
    guard_count: int | None


@dataclass(frozen=True)
class Break:
    compile_id: str
    site: str  # file:line, as PyTorch names it
    reason: str  # the reason's first line


@dataclass
class TraceShape:
    compiles: list[Compile] = field(default_factory=list)
    breaks: list[Break] = field(default_factory=list)
    # compile id -> [(filename, line, name)] from the dynamo_start record
    start_stacks: dict[str, list[tuple[str, int, str]]] = field(default_factory=dict)
    # compile id -> the stack_trace lines of its compilation_metrics
    metric_stacks: dict[str, list[str]] = field(default_factory=dict)


def _first_line(text: Any) -> str | None:
    if text is None:
        return None
    return str(text).strip().splitlines()[0] if str(text).strip() else ""


def read_trace_shape(trace_dir: str) -> TraceShape:
    shape = TraceShape()
    for path in sorted(glob.glob(os.path.join(trace_dir, "*.log"))):
        strings: dict[int, str] = {}
        pending_break: str | None = None  # compile id whose break payload follows
        payload: list[str] = []
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
        lines.append("")  # flush the last payload
        for line in lines:
            if line.startswith("\t"):
                if pending_break is not None:
                    payload.append(line[1:])
                continue
            if pending_break is not None:
                _add_break(shape, pending_break, payload)
                pending_break, payload = None, []
            brace = line.find("] {")
            if brace < 0:
                continue
            try:
                md = json.loads(line[brace + 2 :])
            except ValueError:
                continue
            cid = f"{md.get('frame_id')}/{md.get('frame_compile_id')}"
            if md.get("attempt"):
                cid += f"_{md['attempt']}"
            if "str" in md:
                name, idx = md["str"]
                strings[int(idx)] = name
            elif "dynamo_start" in md:
                shape.start_stacks[cid] = [
                    (strings.get(fr.get("filename"), "?"), int(fr.get("line", 0)), str(fr.get("name", "")))
                    for fr in md["dynamo_start"].get("stack", [])
                ]
            elif "compilation_metrics" in md:
                m = md["compilation_metrics"]
                shape.compiles.append(
                    Compile(
                        compile_id=str(m.get("compile_id")),
                        co_name=str(m.get("co_name")),
                        co_filename=str(m.get("co_filename")),
                        co_firstlineno=int(m.get("co_firstlineno") or 0),
                        fail_type=m.get("fail_type"),
                        fail_reason=_first_line(m.get("fail_reason")),
                        recompile_reason=_first_line(m.get("recompile_reason")),
                        restart_reasons=tuple(_first_line(r) or "" for r in m.get("restart_reasons") or ()),
                        graph_op_count=m.get("graph_op_count"),
                        guard_count=m.get("guard_count"),
                    )
                )
                shape.metric_stacks[str(m.get("compile_id"))] = list(m.get("stack_trace") or [])
            elif md.get("artifact", {}).get("name") == "dynamo_graph_break_reason":
                pending_break = cid
    return shape


def _add_break(shape: TraceShape, cid: str, payload: list[str]) -> None:
    text = "\n".join(payload)
    m = BREAK_SITE.search(text)
    site = f"{m.group(1)}:{m.group(2)}" if m else "?"
    reason = ""
    for line in payload:
        if line.startswith("Graph Break Reason:"):
            reason = line[len("Graph Break Reason:") :].strip()
            break
    shape.breaks.append(Break(cid, site, reason))


def from_script(stack: list[tuple[str, int, str]], script: str) -> list[tuple[str, int, str]]:
    """The stack from the script's own module frame down: what the script's
    code led to (frames below it belong to however the script was launched)."""
    script = os.path.realpath(script)
    for i, (filename, _line, name) in enumerate(stack):
        if name == "<module>" and os.path.realpath(filename) == script:
            return stack[i:]
    return stack
