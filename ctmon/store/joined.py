"""What Dynamo had done in a process before ctmon joined it (``--pid``).

The agent reads it from PyTorch's own state when it joins (the ``joined``
event, docs/PROTOCOL.md): the code objects holding compiled versions, its
counters, the recompile limit. It is kept as that: figures about the time
before the join, never turned into compile events, so every count ctmon
shows from the join on is one it saw happen.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

FRAMES_SHOWN = 5  # frames a summary names; the count says how many there are


@dataclass
class BeforeFrame:
    file: str
    line: int
    name: str
    versions: int  # compiled versions (Dynamo's cache entries) the code held at the join
    modules: list[str] = field(default_factory=list)  # "cmodel = Sequential": for torch's own wrapper frames

    def label(self) -> str:
        where = f"{self.file}:{self.line} {self.name}"
        if self.modules:
            where += f" (torch.compile of {', '.join(self.modules)})"
        return where


@dataclass
class JoinedBefore:
    pid: int | None
    frames: list[BeforeFrame]
    frame_count: int  # all frames with compiled code, also those past the list's end
    unique_graphs: int | None
    graph_breaks: int | None
    recompile_limit: int | None
    fx_cache: tuple[int, int] | None  # (hits, misses) of Inductor's FX graph cache
    aot_cache: tuple[int, int] | None  # (hits, misses) of the AOTAutograd cache
    compile_s: float | None  # Dynamo's own total of its compile time
    errors: dict[str, str]  # what could not be read, and why

    @property
    def versions(self) -> int:
        return sum(f.versions for f in self.frames)

    def as_dict(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "frame_count": self.frame_count,
            "versions": self.versions,
            "frames": [
                {"file": f.file, "line": f.line, "name": f.name, "versions": f.versions, "modules": f.modules}
                for f in self.frames
            ],
            "unique_graphs": self.unique_graphs,
            "graph_breaks": self.graph_breaks,
            "recompile_limit": self.recompile_limit,
            "fx_graph_cache": _hits_misses(self.fx_cache),
            "aot_autograd_cache": _hits_misses(self.aot_cache),
            "compile_s": self.compile_s,
            "errors": self.errors,
        }

    def summary(self) -> str:
        """One line: what Dynamo had done when ctmon joined."""
        parts = [f"{self.frame_count} frame(s) held compiled code ({self.versions} version(s))"]
        if self.unique_graphs is not None:
            parts.append(f"{self.unique_graphs} unique graph(s)")
        if self.graph_breaks is not None:
            parts.append(f"{self.graph_breaks} graph break(s)")
        if self.compile_s is not None:
            parts.append(f"{self.compile_s:.1f} s compiling")
        if self.fx_cache is not None:
            parts.append(f"FX graph cache {self.fx_cache[0]} hit / {self.fx_cache[1]} miss")
        line = "before ctmon joined: " + ", ".join(parts)
        if self.recompile_limit is not None:
            line += f" (recompile limit {self.recompile_limit})"
        return line

    def frame_lines(self) -> list[str]:
        lines = [f"{f.label()}: {f.versions} version(s)" for f in self.frames[:FRAMES_SHOWN]]
        more = self.frame_count - min(len(self.frames), FRAMES_SHOWN)
        if more > 0:
            lines.append(f"and {more} more")
        return lines


def joined_before(pid: int | None, before: dict[str, object]) -> JoinedBefore:
    """The event's ``before`` as figures; what it lacks is None, never 0."""
    frames_in = _dict(before.get("frames"))
    frames = [f for f in (_frame(x) for x in _list(frames_in.get("list"))) if f is not None]
    counters = _dict(before.get("counters"))
    stats = _dict(counters.get("stats"))
    breaks = _dict(counters.get("graph_break")) if "graph_break" in counters else None
    inductor = _dict(counters.get("inductor"))
    aot = _dict(counters.get("aot_autograd"))
    config = _dict(before.get("config"))
    times = _dict(before.get("compile_times"))
    return JoinedBefore(
        pid=pid,
        frames=frames,
        frame_count=_int(frames_in.get("count")) or len(frames),
        unique_graphs=_int(stats.get("unique_graphs")) if counters else None,
        graph_breaks=sum(v for v in (_int(x) for x in breaks.values()) if v)
        if breaks is not None
        else (0 if counters else None),
        recompile_limit=_int(config.get("recompile_limit")),
        fx_cache=_pair(inductor, "fxgraph_cache_hit", "fxgraph_cache_miss"),
        aot_cache=_pair(aot, "autograd_cache_hit", "autograd_cache_miss"),
        compile_s=_float(times.get("_compile.compile_inner")),
        errors={str(k): str(v) for k, v in _dict(before.get("errors")).items()},
    )


def _frame(x: object) -> BeforeFrame | None:
    if not isinstance(x, dict):
        return None
    modules = [str(m) for m in _list(x.get("modules")) if isinstance(m, str)]
    return BeforeFrame(
        str(x.get("file") or "?"),
        _int(x.get("line")) or 0,
        str(x.get("name") or "?"),
        _int(x.get("entries")) or 0,
        modules,
    )


def _pair(counter: dict[str, object], hit: str, miss: str) -> tuple[int, int] | None:
    if hit not in counter and miss not in counter:
        return None
    return _int(counter.get(hit)) or 0, _int(counter.get(miss)) or 0


def _hits_misses(pair: tuple[int, int] | None) -> dict[str, int] | None:
    return None if pair is None else {"hit": pair[0], "miss": pair[1]}


def _dict(x: object) -> dict[str, object]:
    return x if isinstance(x, dict) else {}


def _list(x: object) -> list[object]:
    return x if isinstance(x, list) else []


def _int(x: object) -> int | None:
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def _float(x: object) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def from_report(d: dict[str, object]) -> JoinedBefore:
    """Back from ``as_dict`` (a report's ``joined``), to say it in words."""

    def pair(x: object) -> tuple[int, int] | None:
        x = _dict(x)
        return (_int(x.get("hit")) or 0, _int(x.get("miss")) or 0) if x else None

    frames = [
        BeforeFrame(
            str(f.get("file") or "?"),
            _int(f.get("line")) or 0,
            str(f.get("name") or "?"),
            _int(f.get("versions")) or 0,
            [str(m) for m in _list(f.get("modules"))],
        )
        for f in _list(d.get("frames"))
        if isinstance(f, dict)
    ]
    return JoinedBefore(
        pid=_int(d.get("pid")),
        frames=frames,
        frame_count=_int(d.get("frame_count")) or len(frames),
        unique_graphs=_int(d.get("unique_graphs")),
        graph_breaks=_int(d.get("graph_breaks")),
        recompile_limit=_int(d.get("recompile_limit")),
        fx_cache=pair(d.get("fx_graph_cache")),
        aot_cache=pair(d.get("aot_autograd_cache")),
        compile_s=_float(d.get("compile_s")),
        errors={str(k): str(v) for k, v in _dict(d.get("errors")).items()},
    )
