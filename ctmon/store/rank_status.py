"""What each rank of a live job is doing now: stepping, compiling, or waiting.

Ranks that compile differently hang a job: the one compiling is busy for
seconds to minutes, the others sit in the next collective, and nothing says
which is which until the NCCL watchdog kills everything. Each rank's store
already knows whether a compile is open (a start without its end) and when
its last step ended; this module reads that against the clock:

* ``compiling``: a compile of this rank is open -- which frame, for how long;
* ``stepping``: a step ended recently (within a few of its usual steps);
* ``waiting``: no step for a while and no compile open, while another rank
  compiles -- it waits for that rank in a collective;
* ``stalled``: no step for a while, nothing compiling anywhere -- stuck in a
  collective, in data loading, or in its own code (py-spy dump --pid tells);
* ``starting``: no step yet and no compile open; ``exited``: the rank's
  process is gone while the job runs on; ``ended``: the job is over.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ctmon.store.compiles import display_name
from ctmon.store.launcher_failures import rank_failures

if TYPE_CHECKING:
    from ctmon.store.rank_stores import RankState
    from ctmon.store.session import Session

STALL_MIN_S = 3.0  # never call a rank stalled sooner than this
STALL_STEPS = 5.0  # ... nor before this many of its usual steps have gone by
USUAL_CAP_MS = 2000.0  # a last step that paid a compile is not a usual one


@dataclass
class RankStatus:
    rank: int
    state: str  # stepping | compiling | waiting | stalled | starting | ended
    detail: str  # "forward for 12 s", "8 s, for rank 1 (compiling forward)"
    steps: int
    last_ms: float | None
    p50_ms: float | None
    compiles: int
    recompiles: int
    breaks: int
    fx_hit: int
    fx_miss: int
    host: str | None
    slowest: bool = False


def _compiling(rs: RankState, now: float) -> tuple[str, float] | None:
    """What this rank has been compiling longest, and for how long: a frame
    (Dynamo's compile) or a frame's backward graph (compiled lazily at the
    first backward, which can take longer than the forward)."""
    cs = rs.session.compile
    oldest: tuple[float, str] | None = None
    if cs.active:
        start = min(cs.active.values(), key=lambda ev: ev.t)
        frame = cs.frames.get(start.frame_id)
        oldest = (start.t, frame.title if frame is not None else display_name(start.name) or "?")
    for cid, t in cs.phases.backward_open.items():
        if oldest is None or t < oldest[0]:
            frame = cs.frames.get(_frame_id(cid))
            oldest = (t, f"backward of {frame.title if frame is not None else '?'}")
    if oldest is None:
        return None
    return oldest[1], max(0.0, now - oldest[0])


def _frame_id(compile_id: str) -> int | None:
    """The frame of a compile id ("3/1" -> 3; "!0/3/1" of compiled autograd -> 3)."""
    parts = compile_id.lstrip("!").split("/")
    try:
        return int(parts[-2])
    except (IndexError, ValueError):
        return None


def rank_statuses(s: Session, now: float, figures: bool = True) -> list[RankStatus]:
    """Every rank's state; ``figures``: also each rank's median step (what
    the ranks view shows -- a statistic over its steps, so the header, which
    needs the states once a second for up to hundreds of ranks, goes without:
    it judges a stall by the rank's last step instead)."""
    compiling = {r: c for r, rs in s.ranks.items() if (c := _compiling(rs, now)) is not None}
    failed = (
        {f.rank: f for f in rank_failures(x.text for x in s.output.lines if x.stream == "stderr")}
        if s.exit is not None
        else {}
    )
    out = []
    for r, rs in sorted(s.ranks.items()):
        series = rs.session.steps.current
        n = len(series) if series is not None else 0
        p50 = series.p50_estimate() if figures and series is not None and n >= 2 else None
        last = series.last_interval_ms() if series is not None and n >= 2 else None
        cs = rs.session.compile
        fx = cs.cache.get("fx_graph")
        usual = p50 if figures else (min(last, USUAL_CAP_MS) if last is not None else None)
        state, detail = _state(s, r, rs, now, n, usual, compiling)
        fail = failed.get(r)
        if fail is not None:
            detail = (
                f"exit {fail.exit_code}"
                + (f" ({fail.signal})" if fail.signal else "")
                + (", first to fail" if fail.first else "")
            )
        out.append(
            RankStatus(
                rank=r,
                state=state,
                detail=detail,
                steps=n,
                last_ms=last,
                p50_ms=p50,
                compiles=cs.compile_count,
                recompiles=cs.recompile_count,
                breaks=cs.graph_break_count,
                fx_hit=fx.hit if fx else 0,
                fx_miss=fx.miss if fx else 0,
                host=rs.host,
            )
        )
    p50s = [x.p50_ms for x in out if x.p50_ms is not None]
    if len(p50s) >= 2:
        top = max(out, key=lambda x: x.p50_ms if x.p50_ms is not None else -1.0)
        if top.p50_ms is not None and top.p50_ms > 1.1 * min(p50s):
            top.slowest = True
    return out


def _state(
    s: Session, r: int, rs: RankState, now: float, n: int, p50: float | None, compiling: dict[int, tuple[str, float]]
) -> tuple[str, str]:
    if s.exit is not None:
        return "ended", ""
    if rs.ended_t is not None:
        return "exited", f"{max(0.0, now - rs.ended_t):.0f} s ago"
    mine = compiling.get(r)
    if mine is not None:
        return "compiling", f"{mine[0]} for {mine[1]:.0f} s"
    series = rs.session.steps.current
    last = series.times[-1] if series is not None and n else rs.first_t
    idle = max(0.0, now - last) if last is not None else 0.0
    usual = (p50 or 0.0) / 1000.0
    if idle < max(STALL_MIN_S, STALL_STEPS * usual):
        return ("stepping", "") if n else ("starting", "")
    others = sorted(compiling)
    if others:
        who = others[0]
        return "waiting", f"{idle:.0f} s, for rank {who} (compiling {compiling[who][0]})"
    if not n:
        return "starting", f"no step for {idle:.0f} s"
    return "stalled", f"no step for {idle:.0f} s, nothing compiling"
