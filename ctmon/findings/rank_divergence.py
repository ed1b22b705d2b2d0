"""Ranks that compiled differently: the classic hang of a distributed job.

Every rank of a data-parallel job runs the same program on its own shard, and
every collective (DDP's gradient all-reduce, FSDP's gathers) waits for all of
them. A rank that recompiles where the others do not -- a short last batch,
a sequence length only its shard has -- stops for the whole compile while the
others sit in the next collective; one whose graph differs may issue other
collectives and never meet them; one that misses a compile cache the others
hit compiles for minutes alone. NCCL's watchdog then kills the job (10
minutes by default) with a timeout that names no cause. Each rank's store
(ctmon/store/rank_stores.py) is compared frame by frame, and the caches rank by
rank.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ctmon.findings import causes as C
from ctmon.findings.model import RANK_LIMIT, Finding
from ctmon.findings.pages import CACHING_PAGE
from ctmon.findings.silent import signal_sent_by_ctmon
from ctmon.store.launcher_failures import collective_timeouts, rank_failures
from ctmon.words.phrases import cut

if TYPE_CHECKING:
    from ctmon.store.compiles import CompileRecord, Frame
    from ctmon.store.rank_stores import RankState
    from ctmon.store.session import Session
    from ctmon.wire.events_compile import CompileStart

FrameKey = tuple[str | None, int | None, str | None]

# A recompile still open this long counts against its rank: long enough that
# ranks starting the same recompile a moment apart are not called divergent,
# short enough to name the rank well before any collective times out.
OPEN_RECOMPILE_S = 5.0

WHY = (
    "Every collective (DDP's gradient all-reduce, FSDP's gathers) waits for all ranks: a rank that compiles "
    "where the others do not stops for that compile while they wait, and a graph that differs may issue "
    "different collectives. Past the process group's timeout (NCCL's watchdog: 10 minutes by default) the job "
    "is killed with a timeout that names no cause."
)
FIX = (
    "Give every rank the same shapes and the same compiled code: the same batch size everywhere "
    "(DistributedSampler and DataLoader with drop_last=True, so no rank gets a short last batch), sequence "
    "lengths padded to the same few buckets on every rank, the same dims marked dynamic on every rank "
    "(torch._dynamo.mark_dynamic, or torch.compile(..., dynamic=True)), and one warm compile cache shared "
    "by all ranks (TORCHINDUCTOR_CACHE_DIR on a shared path, or torch.compiler.save_cache_artifacts / "
    "load_cache_artifacts)."
)

# What is known about ranks whose caches differ: no test here gives ranks one warm cache and shows them even.
CACHE_KNOWN = (
    "The ranks that missed compiled these graphs from scratch: their compile cache did not hold them (by default "
    "TORCHINDUCTOR_CACHE_DIR is a directory per user under the host's /tmp, so a rank on another host, or on a "
    f"fresh one, starts cold). PyTorch's page on sharing and saving compile caches: {CACHING_PAGE}"
)


def _key(f: Frame) -> FrameKey:
    return (f.code.file, f.code.line, f.code.name)


def _ranks_text(ranks: list[int]) -> str:
    ranks = sorted(ranks)
    shown = ", ".join(str(r) for r in ranks[:12]) + (f" and {len(ranks) - 12} more" if len(ranks) > 12 else "")
    return f"rank{'s' if len(ranks) != 1 else ''} {shown}"


def _step_at(rs: RankState, t: float) -> int | None:
    series = rs.session.steps.current
    if series is None or not len(series):
        return None
    return bisect_right(series.times, t)


def _at_step(rs: RankState, k: int | None) -> str:
    """`` at step 7``: the step boundary ``k`` falls in, as the job numbers it (store/steps.py)."""
    series = rs.session.steps.current
    return f" at step {series.number(k)}" if k is not None and series is not None else ""


def _open_compiles(rs: RankState) -> dict[int, list[CompileStart]]:
    """This rank's compiles that started and have not ended, by frame: the
    rank the others are waiting for, and, when the job is killed mid-compile,
    the only trace of the divergence."""
    out: dict[int, list[CompileStart]] = defaultdict(list)
    frames = rs.session.compile.frames
    for start in rs.session.compile.active.values():
        frame = frames.get(start.frame_id)
        if frame is not None:
            out[id(frame)].append(start)
    return out


@dataclass
class Divergence:
    """One frame the ranks compiled a different number of times."""

    frame: Frame  # the instance of the rank that compiled it most
    by_rank: dict[int, Frame]
    opened: dict[int, list[CompileStart]]  # compiles still running, by rank
    counts: dict[int, int]  # compiles (finished and running), by rank; 0 for a rank that never compiled it
    fewest: int

    def extra(self, r: int) -> list[CompileRecord]:
        """Rank r's compiles beyond the fewest any rank made."""
        mine = self.by_rank.get(r)
        return mine.compiles[self.fewest :] if mine is not None else []


def _divergences(s: Session) -> list[Divergence]:
    now = s.last_t or 0.0
    frames: dict[FrameKey, dict[int, Frame]] = defaultdict(dict)
    running: dict[int, dict[int, list[CompileStart]]] = {}
    for r, rs in s.ranks.items():
        running[r] = _open_compiles(rs)
        for f in rs.session.compile.frames.values():
            frames[_key(f)][r] = f
    out = []
    for by_rank in frames.values():
        opened = {r: running[r].get(id(f), []) for r, f in by_rank.items()}
        counts = {r: len(by_rank[r].compiles) + len(opened[r]) if r in by_rank else 0 for r in s.ranks}
        # Ranks a moment apart on the same compile are not divergent: an open
        # compile evens the count (a rank still on its first compile has not
        # compiled less), and tips it only as a recompile that has run
        # OPEN_RECOMPILE_S.
        settled = {
            r: len(by_rank[r].compiles)
            + sum(1 for st in opened[r] if by_rank[r].compiles and now - st.t >= OPEN_RECOMPILE_S)
            if r in by_rank
            else 0
            for r in s.ranks
        }
        if len(set(counts.values())) < 2 or len(set(settled.values())) < 2:
            continue
        most = max(counts, key=lambda r: (counts[r], -r))
        out.append(Divergence(by_rank[most], by_rank, opened, counts, min(counts.values())))
    return out


def _cause(s: Session, d: Divergence) -> frozenset[tuple[int, Any]]:
    """When each rank made its extra compiles of the frame: the step (or,
    without steps, the recompile's moment) on that rank. Frames one change
    recompiled on a rank -- the frames of a forward split by graph breaks --
    share it, and are one cause."""
    out: set[tuple[int, Any]] = set()
    for r in s.ranks:
        rs = s.ranks[r]
        moment = None
        for c in d.extra(r):
            step = _step_at(rs, c.span[0])
            if step is None:
                moment = moment if moment is not None else C.moments(rs.session)
                out.add((r, ("moment", moment.get(c.compile_id, c.compile_id))))
            else:
                out.add((r, step))
        for start in d.opened.get(r, []):
            out.add((r, ("open", _step_at(rs, start.t))))
    return frozenset(out)


def rule_compile_divergence(s: Session) -> list[Finding]:
    if len(s.ranks) < 2:
        return []
    causes: dict[frozenset[tuple[int, Any]], list[Divergence]] = {}
    for d in _divergences(s):
        causes.setdefault(_cause(s, d), []).append(d)
    return [_divergence_finding(s, group) for group in causes.values()]


def _divergence_finding(s: Session, group: list[Divergence]) -> Finding:
    """One finding for one cause: the frames it made the ranks compile
    differently, each rank's extra compiles and why."""
    now = s.last_t or 0.0
    top = group[0]
    counts = top.counts
    groups: dict[int, list[int]] = defaultdict(list)
    for r, n in counts.items():
        groups[n].append(r)
    still = sorted({r for d in group for r, starts in d.opened.items() if starts})
    parts = "; ".join(f"{n}× on {_ranks_text(rs)}" for n, rs in sorted(groups.items(), reverse=True))
    titles = [d.frame.title for d in group]
    if len(group) == 1:
        what = titles[0]
    else:
        alike = all(d.counts == counts for d in group)
        what = f"{len(group)} frames ({', '.join(titles[:4])}{' …' if len(titles) > 4 else ''})"
        parts = f"{parts}{' each' if alike else ' (the first frame)'}"
    evidence = []
    for r in sorted(counts, key=lambda r: (-counts[r], r))[:8]:
        mine = [(d, d.by_rank[r]) for d in group if r in d.by_rank]
        if not mine:
            evidence.append(f"rank {r}: never compiled {'this frame' if len(group) == 1 else 'these frames'}")
            continue
        said = []
        for d, frame in mine:
            name = f"{frame.title} " if len(group) > 1 else ""
            for c in d.extra(r)[:3]:
                step = _step_at(s.ranks[r], c.span[0])
                first = c is frame.compiles[0]
                why = (c.recompile_reason or ("first compile" if first else "")).strip().splitlines()
                said.append(f"{name}{c.compile_id}{_at_step(s.ranks[r], step)}: {cut((why or ['?'])[0], 160)}")
            for start in d.opened[r][:2]:
                step = _step_at(s.ranks[r], start.t)
                why = s.ranks[r].session.compile.pending_reasons(str(start.compile_id)) or ["?"]
                said.append(
                    f"{name}{start.compile_id}{_at_step(s.ranks[r], step)}: still compiling "
                    f"after {now - start.t:.0f} s — {cut(why[0].strip(), 160)}"
                )
        compiled = sum(d.counts[r] for d, _ in mine)
        recompiled = sum(frame.recompiles + len(d.opened[r]) for d, frame in mine)
        running = sum(len(d.opened[r]) for d, _ in mine)
        evidence.append(
            f"rank {r}: {compiled} compile(s), {recompiled} recompile(s)"
            + (f" of {len(mine)} frames" if len(group) > 1 else "")
            + (f" ({running} still compiling)" if running else "")
            + (f" — {'; '.join(said[:6])}" if said else "")
        )
    detail = WHY
    if len(group) > 1:
        detail = (
            f"One change made the ranks compile {len(group)} frames differently, at the same step: "
            f"{', '.join(titles)} (the frames one call runs through, split by graph breaks, recompile "
            f"together). {WHY}"
        )
    return Finding(
        id="rank-divergence:" + "+".join(titles),
        rule="rank-divergence",
        severity="critical",
        title=f"Ranks compiled {what} differently: {parts}"
        + (f" ({_ranks_text(still)} still compiling)" if still else ""),
        file=top.frame.loc.file,
        line=top.frame.loc.line,
        detail=detail,
        evidence=evidence,
        fix=FIX,
        rank=RANK_LIMIT + 50 + max(max(d.counts.values()) - d.fewest for d in group),
        called_from=top.frame.called_from,
    )


def rule_cache_divergence(s: Session) -> list[Finding]:
    """A compile cache hit on some ranks and missed on others: those compile alone."""
    if len(s.ranks) < 2:
        return []
    out = []
    for cache in ("fx_graph", "aot_autograd"):
        hit, missed = [], []
        for r, rs in s.ranks.items():
            c = rs.session.compile.cache.get(cache)
            if c is None:
                continue
            if c.miss:
                missed.append(r)
            elif c.hit:
                hit.append(r)
        if not hit or not missed:
            continue
        name = {"fx_graph": "FX graph", "aot_autograd": "AOTAutograd"}[cache]
        out.append(
            Finding(
                id=f"rank-divergence:cache:{cache}",
                rule="rank-divergence",
                severity="critical",
                title=f"{name} cache hit on {_ranks_text(hit)} and missed on {_ranks_text(missed)}",
                detail=(
                    "The ranks that missed compile from scratch while the others, served from the cache, wait for "
                    "them in the first collective. " + WHY
                ),
                evidence=[
                    f"rank {r}: {rs.session.compile.cache[cache].hit} hit / {rs.session.compile.cache[cache].miss} miss"
                    for r, rs in sorted(s.ranks.items())
                    if cache in rs.session.compile.cache
                ][:8],
                fix=CACHE_KNOWN,
                rank=RANK_LIMIT + 40,
            )
        )
    return out


_KILLED = {
    "SIGKILL": (
        "killed by SIGKILL from outside the process: most often the kernel's out-of-memory killer (see dmesg "
        "or the node's memory graph), or a scheduler's time or memory limit"
    ),
    "SIGSEGV": "crashed in native code (a segmentation fault in an extension, a kernel or the driver)",
    "SIGABRT": "aborted in native code (a failed assertion, NCCL's watchdog after a collective timed out)",
}


_STOP_SIGNALS = ("SIGKILL", "SIGTERM", "SIGINT", "SIGHUP")


def rule_rank_failed(s: Session) -> list[Finding]:
    """A rank died and the launcher stopped the job: which, how, and what it means."""
    if not s.ranks:
        return []
    stderr = [x.text for x in s.output.lines if x.stream == "stderr"]
    fails = rank_failures(stderr)
    if not fails:
        return []
    first = fails[0]
    timed_out = collective_timeouts(stderr).get(first.rank) if first.signal == "SIGABRT" else None
    stop = signal_sent_by_ctmon(s)  # ctmon's own stop (or one it passed on) is no out-of-memory kill
    if timed_out is not None:
        limit = f"the {timed_out.timeout_s:g} s timeout" if timed_out.timeout_s is not None else "its timeout"
        how = f"was aborted by NCCL's watchdog: its {timed_out.op or 'collective'} waited past {limit}"
        why = (
            "a collective did not complete on every rank within the process group's timeout, because some rank "
            "never reached it: the divergence or stall findings name which rank was compiling or stuck"
        )
    else:
        how = f"was killed by {first.signal}" if first.signal else f"exited with code {first.exit_code}"
        why = _KILLED.get(first.signal or "", "")
        if stop is not None and first.signal in _STOP_SIGNALS:
            why = f"{stop.text()} to stop the job; this exit follows from that stop"
    how += f" (pid {first.pid}{f', {first.host}' if first.host else ''})"
    others = [f for f in fails[1:]]
    rs = s.ranks.get(first.rank)
    raised = rs.session.uncaught if rs is not None else None
    where = f" at {raised.file}:{raised.line}" if raised is not None and raised.file and raised.line else ""
    return [
        Finding(
            id="rank-failed",
            rule="rank-failed",
            severity="critical",
            title=f"Rank {first.rank} {how}; the launcher then stopped the job"
            if raised is None
            else f"Rank {first.rank} raised {raised.type}: {cut(raised.message, 120)}{where}; "
            "the launcher then stopped the job",
            file=raised.file if raised is not None else None,
            line=raised.line if raised is not None else None,
            detail=(
                f"The launcher saw rank {first.rank} fail first"
                + (f": {why}." if why else ".")
                + (f" It raised {raised.type}: {cut(raised.message, 1000)}{where}." if raised is not None else "")
                + (
                    f" It then stopped {_ranks_text([f.rank for f in others])} (their exits follow from it)."
                    if others
                    else ""
                )
            ),
            evidence=[
                f"rank {f.rank} (local {f.local_rank}): exit code {f.exit_code}"
                + (f" ({f.signal})" if f.signal else "")
                + f", pid {f.pid}"
                + (" — first" if f.first else "")
                for f in fails[:8]
            ],
            fix=(
                "The rank that was aborted is the one that waited: look at the rank that never reached the "
                "collective (the rank-divergence or stalled-rank findings say which, and why). The wait's limit is "
                "the process group's timeout (init_process_group(timeout=...))."
                if timed_out is not None
                else "Nothing to fix if the stop was intended."
                if stop is not None and first.signal in _STOP_SIGNALS
                # what is known: ctmon does not see why a rank was killed
                else "Look at that rank first: its own traceback in the output if it raised; if it was killed, the "
                "node's system log (dmesg, where the out-of-memory killer names the process it killed) and its "
                "memory say whether memory ran out."
                if first.signal in (None, "SIGKILL")
                else "Look at that rank first: its own output, and the node's logs for the signal."
            ),
            rank=RANK_LIMIT + 120,
        )
    ]


RULES = (rule_compile_divergence, rule_cache_divergence, rule_rank_failed)

# Rules whose figures are the whole job's (the ranks compared, the launcher's
# exit, the machine's GPUs); every other rule reads the job's own store,
# which holds one rank in full (ctmon/store/rank_stores.py): the primary.
JOB_WIDE = ("rank-divergence", "rank-failed", "job-failed", "no-process-reported", "gpu-idle")


def say_scope(s: Session, found: list[Finding]) -> None:
    """In a job of several ranks, a finding read from one rank's store says
    which rank in its title ("Compilation took 8.7 s ... — on rank 0"),
    beside the report's totals, which are summed over the ranks."""
    if len(s.ranks) < 2 or s.primary_rank is None:
        return
    for f in found:
        if f.rule in JOB_WIDE or f.rule.startswith("rank-"):  # comparing ranks: every rank's figures
            continue
        if not f.title.endswith(SCOPE.format(rank=s.primary_rank)):
            f.title += SCOPE.format(rank=s.primary_rank)


SCOPE = " — on rank {rank}"
