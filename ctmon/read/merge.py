"""One job's nodes, each recorded by its own ctmon: one report.

On several machines every node runs its own supervisor under the launcher
the user already has (``ctmon record -- torchrun --nnodes 4 ...``) and
records its node's ranks. Those recordings are one job when their ranks
name the same rendezvous (the ``job`` of their ``process`` events: the
master address and port, and torchrun's run id) and the same world size,
and no rank appears twice. Each recording is read into its own store; the
ranks of the others then join the first's, whose own view (its local rank
0, its launcher, its samples) the report shows beside every rank's figures.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ctmon.read.load import load
from ctmon.read.recording import ReadStats
from ctmon.read.torch_trace import is_torch_trace, load_trace
from ctmon.store import Session
from ctmon.wire.errors import RecordingError


def _job_of(s: Session) -> set[str]:
    return {rs.job for rs in s.ranks.values() if rs.job}


def _node(path: str, s: Session) -> dict[str, Any]:
    hosts = sorted({rs.host for rs in s.ranks.values() if rs.host})
    return {
        "recording": path,
        "host": hosts[0] if len(hosts) == 1 else (s.meta.host if not hosts else ", ".join(hosts)),
        "command": s.meta.command,
        "exit_code": s.exit.status if s.exit is not None and s.exit.known else None,
        "ranks": sorted(s.ranks),
    }


def load_nodes(
    paths: list[str], progress: Callable[[int, int], None] | None = None
) -> tuple[Session, ReadStats, list[dict[str, Any]]]:
    """The first recording's store with every other recording's ranks in it,
    and one object per recording; a ``RecordingError`` (one line) when the
    recordings are not the nodes of one job."""
    traced = [is_torch_trace(p) for p in paths]
    if any(traced):
        session, tstats = load_trace(paths, progress)
        stats = ReadStats()
        stats.warnings += tstats.warnings
        return session, stats, []
    first, stats = load(paths[0])
    nodes = [_node(paths[0], first)]
    if len(paths) == 1:
        return first, stats, []
    names = {p: os.path.basename(p) for p in paths}
    if not first.ranks:
        raise RecordingError(
            f"{names[paths[0]]} holds no ranks: only the recordings of one distributed job's nodes merge"
        )
    job, world = _job_of(first), {rs.world_size for rs in first.ranks.values()}
    owner = {r: paths[0] for r in first.ranks}
    for path in paths[1:]:
        other, more = load(path)
        if not other.ranks:
            raise RecordingError(
                f"{names[path]} holds no ranks: only the recordings of one distributed job's nodes merge"
            )
        theirs = _job_of(other)
        if job and theirs and job != theirs:
            raise RecordingError(
                f"{names[paths[0]]} and {names[path]} are not one job: their ranks met at "
                f"{', '.join(sorted(job))} and at {', '.join(sorted(theirs))}"
            )
        sizes = {rs.world_size for rs in other.ranks.values()}
        if world != sizes:
            raise RecordingError(
                f"{names[paths[0]]} and {names[path]} are not one job: world sizes {world} and {sizes}"
            )
        for r, rs in sorted(other.ranks.items()):
            if r in owner:
                raise RecordingError(
                    f"rank {r} is in both {names[owner[r]]} and {names[path]}: not the nodes of one job"
                )
            owner[r] = path
            first.ranks[r] = rs
        stats.warnings += more.warnings
        nodes.append(_node(path, other))
    first.rev["ranks"] += 1
    first.rev["rank_compiles"] += 1
    return first, stats, nodes
