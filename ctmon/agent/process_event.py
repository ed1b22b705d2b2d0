"""The ``process`` event: who this process is, sent first on its connection."""

from __future__ import annotations

import os
import socket
import sys

from ctmon.agent.rank_info import RankInfo, launched_rank
from ctmon.wire import protocol


def process_event(anchor_ns: int, anchor_wall: float, rank: RankInfo | None = None) -> protocol.Event:
    """The hello; ``rank`` when the process learnt it from its process group,
    else the one its launcher gave it (RANK, WORLD_SIZE), if any."""
    if rank is None:
        rank = launched_rank()
    ev: protocol.Event = {
        "kind": protocol.PROCESS,
        "t": anchor_wall,
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "argv": [protocol.clip(a, 2000) for a in _argv()[:200]],
        "executable": sys.executable,
        "python": sys.version.split()[0],
        "cwd": os.getcwd(),
        "clock": {"perf_ns": anchor_ns, "wall": anchor_wall},
    }
    if rank is not None:
        ev["rank"] = rank.rank
        if rank.world_size is not None:
            ev["world_size"] = rank.world_size
        if rank.local_rank is not None:
            ev["local_rank"] = rank.local_rank
        ev["host"] = protocol.clip(socket.gethostname(), 255)
        job = job_identity()
        if job:
            ev["job"] = protocol.clip(job, 500)
    return ev


def job_identity() -> str | None:
    """Which job a rank belongs to, the same on every node: where its ranks
    meet (MASTER_ADDR:MASTER_PORT) and torchrun's run id."""
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    run = os.environ.get("TORCHELASTIC_RUN_ID")
    if not (addr and port) and not run:
        return None
    return f"{addr or '?'}:{port or '?'}" + (f"/{run}" if run else "")


def _argv() -> list[str]:
    # Under ``python -m`` the agent starts before runpy has put the module's
    # path into argv[0]; name the module the way the command line does.
    argv = list(sys.argv)
    orig = getattr(sys, "orig_argv", None)
    if argv[:1] == ["-m"] and orig and "-m" in orig:
        i = orig.index("-m")
        argv = orig[i : i + 2] + argv[1:]
    return argv
