"""Compile cost against the run, late compiles, step-time spikes, cudagraphs, idle GPU."""

from __future__ import annotations

import re
from bisect import bisect_left
from itertools import accumulate
from typing import TYPE_CHECKING

from ctmon.findings import cudagraphs as CG
from ctmon.findings import guards as G
from ctmon.findings.guard_names import reachable
from ctmon.findings.model import RANK_COST, RANK_GPU, RANK_LATE, RANK_SPIKES, Finding
from ctmon.findings.pages import CACHING_PAGE, REGIONAL_PAGE, TUNING_PAGE
from ctmon.findings.ran_eager import all_empty
from ctmon.findings.shape_advice import KV_CACHE, kv_cache_fix
from ctmon.findings.spike_causes import prompt_steps, prompts_finding, waited_for_ranks
from ctmon.store.records import TRACE_MODE
from ctmon.words.phrases import cut

if TYPE_CHECKING:
    from ctmon.store.compiles import CompileRecord
    from ctmon.store.session import Session

WARMUP_STEPS = 10  # compiles before this boundary (or the first 20% of steps) are warm-up
SPIKE_FACTOR = 3.0
SPIKE_MIN_MS = 5.0
IDLE_UTIL = 40.0
IDLE_MIN_SAMPLES = 3  # samples (about 1 s apart) in the steady loop, away from compiles
SAMPLE_WINDOW_S = 1.0  # NVML utilisation covers roughly the second before a sample

_FOUND_FROM = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')


def _steady_start(s: Session) -> tuple[int, float] | None:
    """Index and wall time of the boundary after which the loop counts as steady."""
    series = s.steps.current
    if series is None or len(series) < WARMUP_STEPS * 2:
        return None
    k = max(WARMUP_STEPS, len(series) // 5)
    return k, series.times[k]


def _frame_name(s: Session, c: CompileRecord) -> str:
    frame = s.compile.frames.get(c.frame_id)
    return frame.title if frame else "?"


def _why(c: CompileRecord) -> str:
    if c.recompile_reason:
        return cut(c.recompile_reason.strip().splitlines()[0], 140)
    return "refused (recompile limit)" if c.limit_hit else "first compile of this frame"


def rule_compile_cost(s: Session) -> list[Finding]:
    cs = s.compile
    total = cs.total_time_s + cs.bwd_time_s
    if cs.compile_count == 0 or total <= 0 or all_empty(s):
        return []  # nothing captured: silent.py's empty-graph warning says what the compiling bought
    # a PyTorch trace holds no run, only its records' span: no share of it
    dur = (s.duration_s or 0.0) if s.meta.mode != TRACE_MODE else 0.0
    share = f" ({total / dur * 100:.0f}% of the {dur:.1f} s run)" if dur > 0 else ""
    frames = sorted(cs.frames.values(), key=lambda f: -f.time_s)
    evidence = [f"{f.title} at {f.loc.text()}: {f.time_s:.2f} s in {len(f.compiles)} compile(s)" for f in frames[:6]]
    if len(frames) > 6:
        evidence.append(f"… and {len(frames) - 6} more frames: {sum(f.time_s for f in frames[6:]):.2f} s")
    if cs.bwd_time_s:
        evidence.append(f"backward graphs: {cs.bwd_time_s:.2f} s in {cs.bwd_compiles} compile(s)")
    recompile_time = sum(c.time_s for c in cs.compiles if c.is_recompile)
    if recompile_time:
        evidence.append(f"recompiles alone: {recompile_time:.2f} s")
    backend = sum(c.backend_s or 0.0 for c in cs.compiles)
    if backend >= 0.05:
        evidence.append(
            f"forward compiles: {backend:.2f} s in the backend (AOTAutograd/Inductor), "
            f"{max(0.0, cs.total_time_s - backend):.2f} s in Dynamo"
        )
    return [
        Finding(
            id="compile-cost",
            rule="compile-cost",
            severity="info",
            title=f"Compilation took {total:.1f} s{share}",
            file=frames[0].loc.file if frames else None,
            line=frames[0].loc.line if frames else None,
            detail="Where the compile time went, by frame. Warm caches (a persistent TORCHINDUCTOR_CACHE_DIR) make restarts cheaper.",
            evidence=evidence,
            fix=(
                "The evidence says which frames the time went to. Known to cut it on a restart: a persistent compile "
                "cache (TORCHINDUCTOR_CACHE_DIR, or torch.compiler.save_cache_artifacts / load_cache_artifacts: "
                f"{CACHING_PAGE}); for a model of repeated blocks, compiling the block instead of the whole model "
                f"(regional compilation: {REGIONAL_PAGE}). mode='max-autotune' compiles much longer than the default: "
                "`ctmon bench` measures the modes on this script."
            ),
            rank=RANK_COST + min(total, 99),
        )
    ]


def rule_late_compiles(s: Session) -> list[Finding]:
    steady = _steady_start(s)
    if steady is None:
        return []
    k, t0 = steady
    series = s.steps.current
    assert series is not None
    late = [c for c in s.compile.compiles if c.span[0] > t0]
    if not late:
        return []
    evidence = []
    for c in late[:8]:
        step = series.times.count_until(c.span[0])
        evidence.append(
            f"{c.compile_id} {_frame_name(s, c)} near step {series.number(step)}, {c.time_s:.2f} s: {_why(c)}"
        )
    if len(late) > 8:
        evidence.append(f"… and {len(late) - 8} more")
    first = s.compile.frames.get(late[0].frame_id)
    first_step = series.times.count_until(late[0].span[0])
    guards = [G.classify(c.recompile_reason) for c in late if c.recompile_reason]
    fix = (
        "Warm up every input shape and mode the loop will meet before timing or serving it (run each once, "
        "e.g. a forward and backward on a batch of each size before the loop)"
    )
    cache = next((g for g in guards if g.kind == G.SHAPE and not reachable(g.name) and KV_CACHE.search(g.name)), None)
    if cache is not None:  # a generation loop's key/value cache: warming up cannot cover every length
        fix = kv_cache_fix(cache.dim)
    else:
        # the lever that keeps each cause from compiling at all is the
        # recompile finding's own (mark_dynamic, drop_last, a cast ...),
        # proven there; this finding adds only when the compile lands
        fix += "; or remove the cause itself: the recompile findings for these compiles give the change for each."
    n = len(late)
    return [
        Finding(
            id="late-compiles",
            rule="late-compiles",
            severity="warning",
            title=(
                f"{n} compile{'s' if n != 1 else ''} in steady state (after step {series.number(k)} of "
                f"{series.last_number()}), the first at step {series.number(first_step)} ({first.title if first else '?'})"
            ),
            file=first.loc.file if first else None,
            line=first.loc.line if first else None,
            detail=(
                f"Each compile stalls the loop for its full compile time ({sum(c.time_s for c in late):.2f} s in "
                "all here), long after warm-up should have ended."
            ),
            evidence=evidence,
            fix=fix,
            rank=RANK_LATE + n,
        )
    ]


def rule_spikes(s: Session) -> list[Finding]:
    series = s.steps.current
    if series is None or len(series) < 5:
        return []
    p50 = series.p50_estimate()
    if not p50:
        return []
    threshold = max(SPIKE_FACTOR * p50, p50 + SPIKE_MIN_MS)
    compiles = list(s.compile.compiles)
    spikes = series.intervals_above(threshold)
    if not spikes:
        return []
    spans_sorted = sorted(c.span for c in compiles)
    ends_max = list(accumulate((b for _, b in spans_sorted), max))
    times = series.times
    marked = {k for k, _ in spikes if _overlaps(spans_sorted, ends_max, times[k - 1], times[k])}
    by_compile = [(k, v) for k, v in spikes if k in marked]
    other = [(k, v) for k, v in spikes if k not in marked]
    out = []
    if by_compile:
        after_warmup = [(k, v) for k, v in by_compile if k > 3]
        evidence = []
        where: CompileRecord | None = None
        after_where = False
        for k, v in sorted(by_compile, key=lambda x: -x[1])[:8]:
            lo, hi = series.times[k - 1], series.times[k]
            inside = [c for c in compiles if c.span[0] < hi and c.span[1] > lo]
            what = ", ".join(f"{c.compile_id} {_frame_name(s, c)} {c.time_s:.2f} s" for c in inside[:3])
            step = f"step {series.number(k)}: {v:.1f} ms"
            evidence.append(f"{step} (compile: {what})" if what else step)
            if inside and (where is None or (k > 3 and not after_where)):
                where, after_where = inside[0], k > 3
        frame = s.compile.frames.get(where.frame_id) if where is not None else None
        out.append(
            Finding(
                id="spikes:compile",
                rule="step-spikes",
                severity="warning" if after_warmup else "info",
                title=f"{len(by_compile)} slow step(s) paid for a compile (p50 {p50:.1f} ms)",
                file=frame.loc.file if frame else None,
                line=frame.loc.line if frame else None,
                detail=(
                    "Compiles inside the step loop show up as slow steps; after warm-up each one is a recompile "
                    "that a stable input (or a warm-up before the loop) would have avoided."
                    if after_warmup
                    else "Only the first steps paid for compiles: that is warm-up."
                ),
                evidence=evidence,
                fix=(
                    "Remove the recompile causes of those steps (the compiles named above, and the recompile findings); "
                    "warm up every input shape before the loop, and before measuring."
                ),
                rank=RANK_SPIKES + len(by_compile) if after_warmup else len(by_compile),
            )
        )
    # mode="reduce-overhead": a step that warmed up or recorded a CUDA graph
    # is slow by design, not a data-loading stall
    graph_runs = CG.runs_in_steps(s.cudagraphs.runs, series.times, [k for k, _ in other])
    if graph_runs:
        out.append(CG.spikes_finding(s, p50, [(k, v) for k, v in other if k in graph_runs], graph_runs))
        other = [(k, v) for k, v in other if k not in graph_runs]
    prompts = prompt_steps(s, series.source, [k for k, _ in other])
    if prompts:
        out.append(prompts_finding(series, p50, [(k, v) for k, v in other if k in prompts]))
        other = [(k, v) for k, v in other if k not in prompts]
    waited = waited_for_ranks(s, series.times, other)
    if waited:
        other = [(k, v) for k, v in other if k not in waited]
        evidence = [
            f"step {series.number(k)}: {v:.1f} ms (rank {r} compiled {c.compile_id} {c.time_s:.2f} s)"
            for k, v in sorted(((k, v) for k, v in spikes if k in waited), key=lambda x: -x[1])[:8]
            for r, c in waited[k][:1]
        ]
        out.append(
            Finding(
                id="spikes:other-rank",
                rule="step-spikes",
                severity="warning",
                title=f"{len(waited)} slow step(s) waited for another rank's compile (p50 {p50:.1f} ms)",
                detail=(
                    "This rank compiled nothing during these steps; another rank did, and this one waited for it "
                    "in the next collective. Every rank pays for a compile any one of them makes."
                ),
                evidence=evidence,
                # no change is proven for the wait itself: what made the other
                # rank compile is that rank's own finding, with its fix
                fix=(
                    "Nothing to change on this rank: the wait is the other rank's compile. Why that rank compiled "
                    "is in its findings (rank-divergence where the ranks compiled differently, or its recompile "
                    "findings), each with the change that removes it."
                ),
                rank=RANK_SPIKES + len(waited),
            )
        )
    if other:
        out.append(
            Finding(
                id="spikes:other",
                rule="step-spikes",
                severity="info",
                title=f"{len(other)} slow step(s) not explained by compiles (p50 {p50:.1f} ms)",
                detail=(
                    "No compile ran during these steps; what did is not in the recording. Common causes are data "
                    "loading, garbage collection, checkpointing or evaluation, logging, and host synchronisation."
                ),
                evidence=[f"step {series.number(k)}: {v:.1f} ms" for k, v in sorted(other, key=lambda x: -x[1])[:8]],
                # what is known, not a fix: the cause is not in the recording
                fix=(
                    "ctmon sees that these steps were slow, not why: a profile of a slow step (torch.profiler) tells. "
                    f"PyTorch's performance tuning guide ({TUNING_PAGE}) covers the data-loading and "
                    "synchronisation causes."
                ),
                rank=len(other) / 10,
            )
        )
    return out


def _cudagraph_fix(reason: str) -> str:
    low = reason.lower()
    if "cpu device" in low:
        return (
            "A CPU tensor or CPU op is part of the graph (named in the reason): create it on the GPU "
            "(e.g. torch.arange(n, device=x.device)) or move it there before the compiled call, so the whole "
            "graph can be captured."
        )
    if "multiple devices" in low:
        return "The graph uses several devices: keep each compiled region on one GPU."
    if "mutated inputs" in low or "input storage mutation" in low:
        return (
            "The graph mutates one of its inputs in place: avoid in-place updates of inputs inside the compiled "
            "function (return the new value instead), or make the mutated tensor a module buffer/parameter."
        )
    if "symbolic shape" in low or "dynamic" in low:
        return (
            "Dynamic shapes defeat CUDA graphs (cudagraph_skip_dynamic_graphs): keep shapes static (pad/bucket, "
            "dynamic=False) so each size gets its own captured graph."
        )
    if "incompatible op" in low:
        return (
            "An op that cannot be captured (often a CPU sync such as .item() or a data-dependent shape) is in the "
            "graph: move it outside the compiled region, or keep the value a tensor."
        )
    if "non-tensor inputs" in low:
        return "The graph takes non-tensor inputs: pass tensors (or constants baked into the graph) only."
    if "re-recording limit" in low:
        return (
            "PyTorch recorded this graph again and again because something it captured kept changing (the reason "
            "above), and now runs it without CUDA graphs. Keep what the reason names stable between calls; "
            "raising torch._inductor.config.triton.cudagraph_unexpected_rerecord_limit only postpones the skip."
        )
    if "caching allocator" in low:
        return "CUDA graphs need PyTorch's caching allocator: unset PYTORCH_NO_CUDA_MEMORY_CACHING."
    return "See PyTorch's reason; reduce-overhead gives no speed-up for the skipped graphs."


def _short_reason(reason: str) -> str:
    head = reason.strip().splitlines()[0] if reason.strip() else reason
    head = head.split(". Found from", 1)[0].split(" Found from", 1)[0]
    return head.removeprefix("skipping cudagraphs due to ").removeprefix("skipping cudagraph due to ").strip() or head


def rule_cudagraphs(s: Session) -> list[Finding]:
    out = []
    for reason, n in s.compile.cudagraph_skips.most_common():
        short = _short_reason(reason)
        frames = list(_FOUND_FROM.finditer(reason))
        m = frames[-1] if frames else None  # the innermost frame of the stack trace PyTorch attached
        out.append(
            Finding(
                id=f"cudagraphs-skipped:{short[:60]}",
                rule="cudagraphs",
                severity="warning",
                title=f"CUDA graphs skipped {n}×: {cut(short, 120)}",
                file=m.group("file") if m else None,
                line=int(m.group("line")) if m else None,
                detail="mode='reduce-overhead' only helps graphs it can capture; these run without CUDA graphs.",
                evidence=[reason[:500]],
                fix=_cudagraph_fix(reason),
                rank=RANK_SPIKES + n,
            )
        )
    return out


def _overlaps(spans_sorted: list[tuple[float, float]], ends_max: list[float], lo: float, hi: float) -> bool:
    """Does any (start, end) span overlap (lo, hi)? Spans sorted by start;
    ends_max[i] is the largest end among the first i+1 spans."""
    i = bisect_left(spans_sorted, (hi, float("-inf")))  # spans starting before hi
    return i > 0 and ends_max[i - 1] > lo


def rule_idle_gpu(s: Session) -> list[Finding]:
    series = s.steps.current
    if series is None or len(series) < WARMUP_STEPS:
        return []
    t0 = series.times[min(WARMUP_STEPS, len(series) // 2)]  # after warm-up; compiles are left out below
    t1 = series.times[-1]
    spans = [c.span for c in s.compile.compiles]
    spans_sorted = sorted(spans)
    ends_max = list(accumulate((b for _, b in spans_sorted), max))
    utils = []
    skipped = 0
    used_gpu = bool(s.meta.devices)
    for ev in s.samples:
        t = ev.t
        if ev.gpus is None or not (t0 <= t <= t1):
            continue
        vals = []
        for g in ev.gpus:
            if g.proc_mem is not None and g.proc_mem > 0:
                used_gpu = True
            if g.util is not None:
                vals.append(g.util)
        if not vals:
            continue
        if _overlaps(spans_sorted, ends_max, t - SAMPLE_WINDOW_S, t):
            skipped += 1  # the GPU waiting for a compile is the compile's cost, not an input-bound loop
            continue
        utils.append(max(vals))
    if not used_gpu or len(utils) < IDLE_MIN_SAMPLES:
        return []
    mean = sum(utils) / len(utils)
    if mean >= IDLE_UTIL:
        return []
    st = series.stats(window=10_000)
    return [
        Finding(
            id="gpu-idle",
            rule="gpu-idle",
            severity="warning",
            title=f"The GPU was mostly idle while steps ran (utilisation {mean:.0f}% on average)",
            detail=(
                "The loop is input-bound or host-bound: the GPU waits for data, for Python between kernels, or for "
                "synchronisations."
            ),
            evidence=[
                f"{len(utils)} samples during the step loop; utilisation min {min(utils):.0f}%, max {max(utils):.0f}%"
                + (f" ({skipped} samples during compiles left out)" if skipped else ""),
                f"step p50 {st.p50_ms or 0:.2f} ms over {len(series)} steps",
            ],
            fix=(
                "ctmon sees that the GPU waited, not for what: a profile of a few steps (torch.profiler) tells. "
                f"What PyTorch's performance tuning guide ({TUNING_PAGE}) gives for a loop the GPU waits on: "
                "DataLoader(num_workers=N, pin_memory=True) with .to(device, non_blocking=True); no .item() or "
                "print of tensors in the loop (each waits for the GPU); for small steps that kernel launches "
                "dominate, mode='reduce-overhead' (CUDA graphs) or a larger batch (`ctmon bench` measures the modes)."
            ),
            rank=RANK_GPU + (100 - mean) / 10,
        )
    ]


def rule_cudagraph_rerecords(s: Session) -> list[Finding]:
    return CG.rerecord_findings(s, _steady_start(s)) + CG.unused_findings(s)


RULES = (rule_compile_cost, rule_late_compiles, rule_spikes, rule_cudagraphs, rule_cudagraph_rerecords, rule_idle_gpu)
