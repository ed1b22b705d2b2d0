"""Which rank of a distributed job this process is, and how it knows.

A launcher (torchrun, accelerate, deepspeed) says so in the environment
before the process starts: RANK and WORLD_SIZE. ``mp.spawn`` and a
Lightning-style re-exec of the script say nothing: the process learns its
rank when it initialises its process group, so that is when it is read --
from ``torch.distributed`` as the job imported it (never imported here).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class RankInfo:
    rank: int
    world_size: int | None
    local_rank: int | None


def launched_rank() -> RankInfo | None:
    """The rank a launcher gave this process (RANK, WORLD_SIZE), if any."""
    rank, world = os.environ.get("RANK", ""), os.environ.get("WORLD_SIZE", "")
    if not (rank.isdigit() and world.isdigit()):
        return None
    return RankInfo(int(rank), int(world), _env_int("LOCAL_RANK"))


def initialised_rank() -> RankInfo | None:
    """This process's rank in its default process group, once it has one.

    Called from the agent's sender thread: reads module state only, and
    ``is_initialized()`` turns true only when the group is complete."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    try:
        if not dist.is_available() or not dist.is_initialized():
            return None
        return RankInfo(int(dist.get_rank()), int(dist.get_world_size()), _env_int("LOCAL_RANK"))
    except Exception:  # a group being torn down, a torch without these: not yet
        return None


def _env_int(name: str) -> int | None:
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() else None


def group_initialised() -> bool:
    """Whether this process has a default process group (a forked child
    inherits its parent's). Module state only: safe in a fork handler."""
    dist = sys.modules.get("torch.distributed")
    try:
        return dist is not None and bool(dist.is_available()) and bool(dist.is_initialized())
    except Exception:
        return False


def own_rank() -> int | None:
    """This process's rank, when a launcher started it as one (RANK, WORLD_SIZE)."""
    rank = launched_rank()
    return rank.rank if rank is not None else None
