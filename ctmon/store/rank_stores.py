"""The ranks of a distributed job: one store each, beside the job's own.

Every process a launcher started as a rank (torchrun, accelerate, deepspeed)
runs the agent and says which rank it is on everything it sends. Each rank's
events fold into a ``Session`` of its own -- its frames, compiles, breaks,
caches and steps, exactly as if it had been the only process -- so per-rank
figures equal that rank's own ``TORCH_TRACE`` file, and ranks can be compared
frame by frame.

The job's session (the one the views and reports read) folds the events of
one rank in full, the *primary* rank -- the first that declares local rank 0,
rank 0 on one node -- plus the events of processes that are no rank (the
launcher). Job-wide totals are sums over the ranks (ctmon/report/build.py).
A rank is known from its ``process`` event; an event naming a rank no process
declared (PyTorch's trace says rank 0 in a one-process group) is the job's.

The job's own process may turn into a rank only when it initialises a
process group (Lightning's first process is rank 0): what it compiled before
then came without a rank, and is kept (bounded) until a rank is declared, so
that rank's store starts with it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ctmon.wire import events as E
from ctmon.wire import events_compile as EC
from ctmon.wire.event_base import Ranked

if TYPE_CHECKING:
    from ctmon.store.session import Session


@dataclass
class RankState:
    rank: int
    session: Session
    local_rank: int | None = None
    world_size: int | None = None
    host: str | None = None
    pid: int | None = None
    job: str | None = None  # where its job's ranks meet (the same on every node)
    first_t: float | None = None  # its hello
    last_t: float | None = None  # the last event it sent
    gpu_mem_peak: int | None = None  # its process's GPU memory, summed over devices, at its highest
    ended_t: float | None = None  # its agent's connection closed (the process ended)

    def saw_gpus(self, gpus: list[E.GpuSample]) -> None:
        pid = self.pid
        if pid is None:
            return
        mine = [g.pid_mem[pid] for g in gpus if g.pid_mem and pid in g.pid_mem]
        if mine and (self.gpu_mem_peak is None or sum(mine) > self.gpu_mem_peak):
            self.gpu_mem_peak = sum(mine)

    def declare(self, ev: E.Process) -> None:
        """Its hello (again, after an exec: the same rank, maybe a new program)."""
        self.local_rank = ev.local_rank if ev.local_rank is not None else self.local_rank
        self.world_size = ev.world_size if ev.world_size is not None else self.world_size
        self.host = ev.host or self.host
        self.pid = ev.pid if ev.pid is not None else self.pid
        self.job = ev.job or self.job
        self.ended_t = None  # a hello after an end: the same process, exec'd into another program
        if self.first_t is None and ev.t > 0:
            self.first_t = ev.t


def is_primary(ev: E.Process) -> bool:
    """The rank whose view the job's own session shows: local rank 0."""
    if ev.local_rank is not None:
        return ev.local_rank == 0
    return ev.rank == 0


# what a process that becomes a rank late compiled before: its rank's too
KEPT_UNTIL_RANKED = (
    EC.CompileCall,
    EC.CompileStart,
    EC.Compile,
    EC.BwdCompile,
    EC.CompilePhase,
    E.Hotness,
    EC.RecompileReasons,
    EC.GraphBreak,
    EC.CacheResult,
    EC.Autotune,
    EC.Cudagraph,
    E.LibraryLog,
)
KEPT_MAX = 20_000  # a long job that never becomes a rank stops keeping


def keeping(handler: Callable[[Session, Any], None]) -> Callable[[Session, Any], None]:
    """``handler``, keeping the rank-less events it folds into the job's own
    store until a rank is declared (a rank's own store keeps none: its
    ``unranked`` is None)."""

    def keep_then_fold(s: Session, ev: Ranked) -> None:
        kept = s.unranked
        if kept is not None and ev.rank is None:
            if len(kept) < KEPT_MAX:
                kept.append(ev)
            else:
                s.unranked = None
        handler(s, ev)

    return keep_then_fold


def _adopt(s: Session, rs: RankState, ev: E.Process) -> None:
    """The job's own process declared a rank: what it did before is that rank's.

    Only when it is the primary rank: the job's session already counts the
    primary's events once, so the rank's store gets them without a double."""
    if ev.pid is None or ev.pid != s.meta.pid:
        return  # another process's hello (a launcher's rank): keep waiting
    kept, s.unranked = s.unranked, None
    if kept and s.primary_rank == rs.rank:
        for old in kept:
            rs.session.apply(old)


# another rank's compile is news a viewer shows at once; its steps are not
_COMPILE_KINDS = (EC.CompileStart, EC.Compile, EC.GraphBreak, EC.RecompileReasons, EC.CacheResult)


def route(s: Session, ev: Ranked, rank: int, new_store: Callable[[], Session]) -> bool:
    """Fold a rank's event into that rank's store; True when the job's own
    session ``s`` is to leave it there (it is not the primary rank's)."""
    if type(ev) is E.Process:
        rs = s.ranks.get(rank)
        if rs is None:
            rs = s.ranks[rank] = RankState(rank, new_store())
        rs.declare(ev)
        if s.primary_rank is None and is_primary(ev):
            s.primary_rank = rank
        s.rev["ranks"] += 1
    else:
        found = s.ranks.get(rank)
        if found is None:
            return False  # no process declared that rank: the job's own event
        rs = found
    if type(ev) is E.ProcessEnd:
        rs.ended_t = ev.t
        s.rev["rank_compiles"] += 1  # news: show it at once
        return True
    rs.session.apply(ev)
    if type(ev) is E.Process and s.unranked is not None:
        _adopt(s, rs, ev)
    if ev.t > 0 and (rs.last_t is None or ev.t > rs.last_t):
        rs.last_t = ev.t
    if rank != s.primary_rank:
        s.rev["rank_compiles" if type(ev) in _COMPILE_KINDS else "ranks"] += 1
        return True
    # the primary rank's hello names the job only where no launcher did
    return type(ev) is E.Process and s.meta.pid is not None
