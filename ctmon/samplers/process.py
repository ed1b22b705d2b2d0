"""CPU, memory and threads of the job's process tree (psutil)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psutil


class ProcessSampler:
    """The process ``pid`` (its rss and threads) and its tree; with ``also``
    (the other processes of a job ctmon joined by several pids), their trees
    too, in the CPU, tree memory and GPU figures."""

    def __init__(self, pid: int, also: Sequence[int] = ()) -> None:
        import psutil

        self._psutil = psutil
        self._pid = pid
        self._procs: dict[int, psutil.Process] = {}
        self._root: psutil.Process | None
        try:
            self._root = psutil.Process(pid)
            self._root.cpu_percent(None)  # prime: the first call returns 0.0
        except psutil.Error:
            self._root = None
        self._others: list[psutil.Process] = []
        for other in also:
            try:
                self._others.append(psutil.Process(other))
            except psutil.Error:
                continue  # gone already: nothing of it to sample
        psutil.cpu_percent(None)

    def tree_pids(self) -> list[int]:
        return list(self._procs) or [self._pid]

    def sample(self) -> dict[str, Any]:
        ps = self._psutil
        out: dict[str, Any] = {}
        root = self._root
        if root is None:
            return out
        procs = {root.pid: root}
        for top in (root, *self._others):
            try:
                kids = top.children(recursive=True)
            except ps.Error:
                kids = []
            if top is not root:
                procs[top.pid] = self._procs.get(top.pid, top)
            for k in kids:
                procs[k.pid] = self._procs.get(k.pid, k)
        cpu = 0.0
        rss = 0
        tree_rss = 0
        threads = 0
        alive = {}
        for pid, p in procs.items():
            try:
                with p.oneshot():
                    if p.status() == ps.STATUS_ZOMBIE:
                        continue  # dead, not yet reaped: it reads 0 B, which it never had alive
                    # cached Process objects keep the previous CPU times; a
                    # newly seen process returns 0.0 here and counts next time
                    c = p.cpu_percent(None)
                    mem = p.memory_info().rss
                    n = p.num_threads()
            except ps.Error:
                continue
            alive[pid] = p
            cpu += c
            tree_rss += mem
            if pid == root.pid:
                rss = mem
                threads = n
        self._procs = alive
        out["procs"] = len(alive)
        if alive:
            out["cpu_percent"] = round(cpu, 1)
            out["tree_rss"] = tree_rss
        if root.pid in alive:
            out["rss"] = rss
            out["threads"] = threads
        # else the job's process is gone: no figure of it, rather than a
        # 0 B a viewer would show as its last (the store keeps the last live one)
        try:
            vm = ps.virtual_memory()
            out["sys_cpu_percent"] = ps.cpu_percent(None)
            out["sys_mem_used"] = vm.total - vm.available
            out["sys_mem_total"] = vm.total
            out["cpus"] = ps.cpu_count() or 1
        except ps.Error:
            pass
        return out
