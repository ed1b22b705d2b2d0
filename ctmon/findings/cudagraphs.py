"""CUDA graphs of ``mode="reduce-overhead"``: slow steps that warmed up or
recorded a graph, and graphs recorded again for new input sizes.

PyTorch's CUDA-graph trees run a new graph once eagerly (warm-up), record it
on its next call, and replay it after that (torch/_inductor/cudagraph_trees.py,
``CUDAGraphTreeManager._run``). A graph with dynamic shapes is recorded once
per distinct set of sizes (``cudagraphify_impl`` keys its graphs by the int
inputs), and a frame recompiled for a new shape is a new graph: either way
each new size costs a warm-up and a recording, and a CUDA graph of its own in
the pool. What is known to help, and what is not:

* padding inputs to a few sizes: a few graphs, recorded once each, replayed
  from then on (benchmarks/gpu/cudagraph_check.py, ``padded``);
* ``torch._inductor.config.triton.cudagraph_skip_dynamic_graphs = True``:
  graphs with dynamic shapes run without CUDA graphs -- no recordings, and
  none of reduce-overhead's gain for them (``skip-dynamic``);
* ``torch._dynamo.mark_dynamic`` / ``dynamic=True`` do NOT: they avoid
  recompiles, and the dynamic graph still records a CUDA graph per size
  (``mark-dynamic``).

PyTorch's own warning past ``cudagraph_dynamic_shape_warn_limit`` sizes
(``maybe_warning_due_to_dynamic_shape`` in torch/_inductor/cudagraph_utils.py)
gives the same two options.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ctmon.findings.model import RANK_SPIKES, Finding, Fix, config_fix
from ctmon.findings.pytorch_hints import INDUCTOR_CONFIG
from ctmon.store.cudagraphs import RECORD, GraphRecordings, GraphRun
from ctmon.words.phrases import cut

if TYPE_CHECKING:
    from ctmon.store.compiles import CompileRecord, Frame
    from ctmon.store.session import Session

FIRST_GRAPHS = ("forward", "inference")  # whose inputs are the user's: their sizes name the new shapes

PAD_FIX = (
    "Pad the inputs to a few bucket sizes (e.g. the batch up to a multiple of 8, or to one fixed length, with the "
    "padding masked out of the loss), so that a few graphs are recorded once each and replayed from then on."
)
MARK_DYNAMIC_NOTE = (
    "torch._dynamo.mark_dynamic or dynamic=True do not avoid this: they avoid recompiles, but each distinct size "
    "still needs a CUDA graph of its own."
)
SKIP_DYNAMIC_FIX = (
    "Or set torch._inductor.config.triton.cudagraph_skip_dynamic_graphs = True: graphs with dynamic shapes then "
    "run without CUDA graphs, which ends the recordings and gives up reduce-overhead's speed-up for those graphs."
)
AGAIN_FIX = (
    "A graph recorded again at the same sizes means something PyTorch captured no longer held (an input's memory "
    'address, a parameter replaced): TORCH_LOGS="+cudagraphs" makes PyTorch log each re-recording with its '
    "reason. Past torch._inductor.config.triton.cudagraph_unexpected_rerecord_limit re-recordings it runs that "
    "graph without CUDA graphs."
)


def _compiles_by_id(s: Session) -> dict[str, CompileRecord]:
    return {c.compile_id: c for c in s.compile.compiles}


def _frame_of(s: Session, compiles: dict[str, CompileRecord], compile_id: str | None) -> Frame | None:
    c = compiles.get(compile_id) if compile_id is not None else None
    return s.compile.frames.get(c.frame_id) if c is not None else None


def _graph_name(s: Session, compiles: dict[str, CompileRecord], compile_id: str | None) -> str:
    frame = _frame_of(s, compiles, compile_id)
    name = frame.title if frame is not None else "?"
    return f"{name} [{compile_id or '?'}]"


def coverage_line(s: Session) -> str | None:
    """How many of the trees' graph calls were replays, where the agent counted them."""
    cg = s.cudagraphs
    share = cg.coverage
    if share is None:
        return None
    return (
        f"CUDA graphs replayed {cg.replays:,} of the {cg.calls:,} graph calls PyTorch's CUDA-graph trees took "
        f"({share:.0%}); the rest: {cg.warmups_total} warm-up(s), {cg.recordings_total} recording(s), "
        f"{cg.eager} eager run(s) during warm-ups"
    )


# ---- slow steps ----


def runs_in_steps(runs: Sequence[GraphRun], times: Sequence[float], steps: Sequence[int]) -> dict[int, list[GraphRun]]:
    """The warm-ups and recordings inside each of ``steps`` (boundary k's
    interval: times[k-1] to times[k])."""
    if not runs or not steps:
        return {}
    ordered = sorted(runs, key=lambda r: r.t)
    starts = [r.t for r in ordered]
    longest = max(r.dur_s for r in ordered)
    out: dict[int, list[GraphRun]] = {}
    for k in steps:
        lo, hi = times[k - 1], times[k]
        i = bisect_left(starts, hi)  # runs starting before the step ended
        inside = []
        while i > 0 and starts[i - 1] + longest > lo:
            i -= 1
            if ordered[i].span[1] > lo:
                inside.append(ordered[i])
        if inside:
            out[k] = inside[::-1]
    return out


def _number(s: Session, k: int) -> int:
    """Boundary ``k``'s step as the job numbers it (store/steps.py)."""
    series = s.steps.current
    return series.number(k) if series is not None else k


def _step_text(s: Session, compiles: dict[str, CompileRecord], runs: list[GraphRun]) -> str:
    parts: dict[tuple[str, str | None], list[str]] = {}
    for r in runs:
        what = "recorded" if r.event == RECORD else "warmed up"
        graphs = parts.setdefault((what, r.compile_id), [])
        label = f"{r.graph or '?'} {r.sizes}"
        if label not in graphs:
            graphs.append(label)
    return "; ".join(
        f"{what} {_graph_name(s, compiles, cid)}: {', '.join(graphs[:3])}" for (what, cid), graphs in parts.items()
    )


def spikes_finding(s: Session, p50: float, slow: list[tuple[int, float]], runs: dict[int, list[GraphRun]]) -> Finding:
    """Slow steps explained by CUDA-graph warm-ups and recordings."""
    compiles = _compiles_by_id(s)
    cg = s.cudagraphs
    evidence = [
        f"step {_number(s, k)}: {v:.1f} ms ({_step_text(s, compiles, runs[k])})"
        for k, v in sorted(slow, key=lambda x: -x[1])[:8]
    ]
    cov = coverage_line(s)
    if cov:
        evidence.append(cov)
    again = rerecorded_frames(s)
    fix = (
        "These steps paid for new input sizes: see the finding 'CUDA graphs re-recorded' for how to record fewer graphs."
        if again
        else "Nothing to change: each graph is recorded once and replayed from then on. Run every input size once "
        "before timing the loop."
    )
    first = min(slow)[0]
    frame = _frame_of(s, compiles, runs[first][0].compile_id)
    n = len(slow)
    return Finding(
        id="spikes:cudagraphs",
        rule="step-spikes",
        severity="info",
        title=f"{n} slow step{'s' if n != 1 else ''} warmed up or recorded CUDA graphs (p50 {p50:.1f} ms)",
        file=frame.loc.file if frame else None,
        line=frame.loc.line if frame else None,
        detail=(
            "mode='reduce-overhead' runs each new graph (a new graph, or new input sizes of one) once eagerly to warm "
            "it up, then records its CUDA graph on the next call, and replays it from then on: those steps are slow "
            f"by design ({cg.warmup_s * 1000:.0f} ms of warm-ups and {cg.record_s * 1000:.0f} ms of recordings in all)."
        ),
        evidence=evidence,
        fix=fix,
        rank=n / 10,
    )


# ---- re-recordings ----


def rerecorded_frames(s: Session) -> dict[str, list[GraphRecordings]]:
    """Frames (by ``_frame_key``) whose graphs were recorded more than once
    each, with their graphs' recordings."""
    compiles = _compiles_by_id(s)
    by_frame: dict[str, list[GraphRecordings]] = {}
    for g in s.cudagraphs.graphs.values():
        if g.recordings:
            by_frame.setdefault(_frame_key(s, compiles, g.compile_id), []).append(g)
    return {key: gs for key, gs in by_frame.items() if rerecord_count(gs) > 0}


def _frame_key(s: Session, compiles: dict[str, CompileRecord], compile_id: str | None) -> str:
    """A frame's name and place (two frames may share a name), or the compile id where the compile is unknown."""
    frame = _frame_of(s, compiles, compile_id)
    if frame is None:
        return f"[{compile_id or '?'}]"
    return f"{frame.title} ({frame.loc.text()})" if frame.loc.file else frame.title


def rerecord_count(graphs: list[GraphRecordings]) -> int:
    """A frame's recordings beyond the first of each kind of graph (forward,
    backward, inference): one per new size, recompile or recording again.
    The first is its first compile's graph at its first size, in as many
    recordings as Inductor made partitions of it."""
    out = 0
    for kind in {g.graph for g in graphs if g.recordings}:
        of_kind = [g for g in graphs if g.graph == kind and g.recordings]
        first = min(of_kind, key=lambda g: g.first_record_t or 0.0)
        out += sum(g.recordings for g in of_kind) - len(first.first_functions)
    return out


def _new_sizes(graphs: list[GraphRecordings]) -> list[str]:
    """The input sizes recorded after the first, of the graphs whose inputs are the user's."""
    firsts = [g for g in graphs if g.graph in FIRST_GRAPHS] or graphs
    seen: list[str] = []
    for g in sorted(firsts, key=lambda g: g.first_record_t or 0.0):
        for size in g.sizes:
            if size not in seen:
                seen.append(size)
    return seen[1:]


def _fixes(graphs: list[GraphRecordings]) -> list[Fix]:
    """_fix's setting as data: skipping CUDA graphs for dynamic graphs (the
    padding is the user's code, in words)."""
    if any(g.dynamic for g in graphs):
        return [config_fix(INDUCTOR_CONFIG, "triton.cudagraph_skip_dynamic_graphs", True)]
    return []


def _fix(graphs: list[GraphRecordings]) -> str:
    dynamic = any(g.dynamic for g in graphs)
    recompiled = len({g.compile_id for g in graphs}) > 1
    new_sizes = bool(_new_sizes(graphs))
    parts = []
    if new_sizes or dynamic or recompiled:
        parts.append(
            "Each distinct input size is a CUDA graph of its own, warmed up and recorded when first met and kept in "
            "the CUDA-graph memory pool. " + PAD_FIX + " " + MARK_DYNAMIC_NOTE
        )
        if dynamic:
            parts.append(SKIP_DYNAMIC_FIX)
        elif recompiled:
            parts.append("(The frame recompiled for each size: see the recompile findings for the shapes.)")
    if any(g.again for g in graphs):
        parts.append(AGAIN_FIX)
    return " ".join(parts)


def rerecord_findings(s: Session, steady: tuple[int, float] | None) -> list[Finding]:
    """One finding per frame whose CUDA graphs were recorded again."""
    frames = rerecorded_frames(s)
    if not frames:
        return []
    compiles = _compiles_by_id(s)
    late = _late_rerecords(s, steady[1]) if steady is not None else {}
    out = []
    for key, graphs in frames.items():
        n = rerecord_count(graphs)
        frame = _frame_of(s, compiles, graphs[0].compile_id)
        name = frame.title if frame is not None else key
        new = _new_sizes(graphs)
        shown = "; ".join(new[:4]) + (f"; … {len(new) - 4} more" if len(new) > 4 else "")
        what = f"{len(new)} new input size{'s' if len(new) != 1 else ''}: {shown}" if new else "same input sizes"
        evidence = [_graph_line(s, compiles, g) for g in sorted(graphs, key=lambda g: g.first_record_t or 0.0)[:8]]
        n_late = late.get(key, 0)
        if n_late and steady is not None:
            evidence.append(f"{n_late} of the re-recordings after step {_number(s, steady[0])} (steady state)")
        cov = coverage_line(s)
        if cov:
            evidence.append(cov)
        out.append(
            Finding(
                id=f"cudagraphs-rerecorded:{key[:120]}",
                rule="cudagraphs",
                severity="warning" if n_late else "info",
                title=f"CUDA graphs re-recorded {n}× for {cut(name, 80)} ({cut(what, 120)})",
                file=frame.loc.file if frame else None,
                line=frame.loc.line if frame else None,
                detail=(
                    f"mode='reduce-overhead' recorded {sum(g.recordings for g in graphs)} CUDA graphs for this frame "
                    f"in {sum(g.record_s for g in graphs):.2f} s (and warmed each up first, "
                    f"{sum(g.warmup_s for g in graphs):.2f} s): a step that meets a new size pays for a warm-up and a "
                    "recording before the graph replays."
                ),
                evidence=evidence,
                fix=_fix(graphs),
                fixes=_fixes(graphs),
                rank=RANK_SPIKES + n if n_late else n / 10,
            )
        )
    return out


def _graph_line(s: Session, compiles: dict[str, CompileRecord], g: GraphRecordings) -> str:
    line = (
        f"{_graph_name(s, compiles, g.compile_id)} {g.graph or '?'} graph: {g.recordings} recording(s) "
        f"({g.record_s * 1000:.0f} ms), {g.warmups} warm-up(s); sizes {'; '.join(g.sizes[:6])}"
    )
    if g.dynamic:
        line += " (dynamic shapes: one CUDA graph per distinct size)"
    if g.again:
        line += f"; {g.again} recorded again at sizes recorded before"
    return line


def _late_rerecords(s: Session, t0: float) -> dict[str, int]:
    """Per frame: re-recordings (recordings after each graph kind's first) that began after ``t0``."""
    compiles = _compiles_by_id(s)
    first: set[tuple[str, str | None]] = set()
    out: dict[str, int] = {}
    for r in sorted(s.cudagraphs.runs, key=lambda r: r.t):
        if r.event != RECORD:
            continue
        name = _frame_key(s, compiles, r.compile_id)
        if (name, r.graph) not in first:
            first.add((name, r.graph))
            continue
        if r.t > t0:
            out[name] = out.get(name, 0) + 1
    return out


# ---- compiles the trees never ran ----

UNUSED_FIX = (
    "A known case: torch._inductor.config.triton.cudagraph_skip_dynamic_graphs = True runs graphs with dynamic "
    "shapes (a recompile for a new size makes one) without CUDA graphs, and torch 2.11 counts no skip for them "
    "(benchmarks/gpu/cudagraph_check.py, skip-dynamic). If it is set, that is the trade it makes: padding the inputs "
    'to a few sizes keeps CUDA graphs instead, each size recorded once. Otherwise TORCH_LOGS="+cudagraphs" shows '
    "what PyTorch decided for these graphs."
)


def silent_compiles(s: Session) -> dict[str, list[CompileRecord]]:
    """By frame: compiles whose graphs PyTorch's CUDA-graph trees never ran,
    of frames whose other compiles they did run (so the frame is compiled
    for CUDA graphs), with no skip reason on the compile."""
    active = {cid for cid, _ in s.cudagraphs.graphs}
    if not active:
        return {}
    compiles = _compiles_by_id(s)
    frames = {compiles[cid].frame_id for cid in active if cid in compiles}
    out: dict[str, list[CompileRecord]] = {}
    for c in s.compile.compiles:
        if c.compile_id in active or c.frame_id not in frames:
            continue
        if not c.ok or c.limit_hit or c.cudagraph_skip or c.graph_ops == 0:
            continue  # no graph to run, or PyTorch said why
        out.setdefault(_frame_key(s, compiles, c.compile_id), []).append(c)
    return out


def unused_findings(s: Session) -> list[Finding]:
    """Graphs that ran without CUDA graphs where PyTorch counted no skip at
    all (a skip event carries no compile id: with one, the skip finding
    says why)."""
    if sum(s.compile.cudagraph_skips.values()):
        return []
    out = []
    for key, cs in silent_compiles(s).items():
        frame = s.compile.frames.get(cs[0].frame_id)
        name = frame.title if frame is not None else key
        n = len(cs)
        evidence = [f"{c.compile_id}: {_why(c)}" for c in cs[:8]]
        cov = coverage_line(s)
        if cov:
            evidence.append(cov)
        out.append(
            Finding(
                id=f"cudagraphs-unused:{key[:120]}",
                rule="cudagraphs",
                severity="warning",
                title=f"CUDA graphs not used for {n} compile{'s' if n != 1 else ''} of {name}, and PyTorch gave no reason",
                file=frame.loc.file if frame else None,
                line=frame.loc.line if frame else None,
                detail=(
                    "mode='reduce-overhead' ran this frame's other graphs as CUDA graphs, but these compiles' graphs "
                    "never reached PyTorch's CUDA-graph trees (no warm-up, recording or replay) and PyTorch counted "
                    "no skip: they run without CUDA graphs."
                ),
                evidence=evidence,
                fix=UNUSED_FIX,
                rank=RANK_SPIKES + n,
            )
        )
    return out


def _why(c: CompileRecord) -> str:
    if c.recompile_reason:
        return "recompiled: " + cut(c.recompile_reason.strip().splitlines()[0], 140)
    return "first compile of the frame"
