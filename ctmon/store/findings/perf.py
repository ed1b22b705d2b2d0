"""Compile cost against the run, late compiles, step-time spikes, cudagraphs, idle GPU."""

from __future__ import annotations

from bisect import bisect_right
from typing import TYPE_CHECKING

from ctmon.store.findings.model import Finding

if TYPE_CHECKING:
    from ctmon.store.session import Session

WARMUP_STEPS = 10  # compiles before this boundary (or the first 20% of steps) are warm-up
SPIKE_FACTOR = 3.0
SPIKE_MIN_MS = 5.0
IDLE_UTIL = 40.0
IDLE_MIN_SAMPLES = 5


def _steady_start(s: Session) -> tuple[int, float] | None:
    """Index and wall time of the boundary after which the loop counts as steady."""
    series = s.steps.current
    if series is None or len(series) < WARMUP_STEPS * 2:
        return None
    k = max(WARMUP_STEPS, len(series) // 5)
    return k, series.times[k]


def rule_compile_cost(s: Session) -> list[Finding]:
    cs = s.compile
    total = cs.total_time_s + cs.bwd_time_s
    if cs.compile_count == 0 or total <= 0:
        return []
    dur = s.duration_s or 0.0
    share = f" ({total / dur * 100:.0f}% of the {dur:.1f} s run)" if dur > 0 else ""
    frames = sorted(cs.frames.values(), key=lambda f: -f.time_s)
    evidence = [f"{f.title} at {f.loc.text()}: {f.time_s:.2f} s in {len(f.compiles)} compile(s)" for f in frames[:6]]
    if cs.bwd_time_s:
        evidence.append(f"backward graphs: {cs.bwd_time_s:.2f} s in {cs.bwd_compiles} compile(s)")
    recompile_time = sum(c.time_s for c in cs.compiles if c.is_recompile)
    if recompile_time:
        evidence.append(f"recompiles alone: {recompile_time:.2f} s")
    return [Finding(
        id="compile-cost", rule="compile-cost", severity="info",
        title=f"Compilation took {total:.1f} s{share}",
        file=frames[0].loc.file if frames else None, line=frames[0].loc.line if frames else None,
        detail="Where the compile time went, by frame. Warm caches (a persistent TORCHINDUCTOR_CACHE_DIR) make restarts cheaper.",
        evidence=evidence,
        fix=("Compile the hot parts (the model's forward/loss), not set-up code; keep caches warm between runs; "
             "pick the mode by measurement (max-autotune compiles much longer)."),
        rank=total,
    )]


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
        step = bisect_right(series.times, c.span[0])
        frame = s.compile.frames.get(c.frame_id)
        name = frame.title if frame else "?"
        why = c.recompile_reason.splitlines()[0][:140] if c.recompile_reason else ("new frame" if not c.limit_hit else "refused (limit)")
        evidence.append(f"{c.compile_id} {name} near step {step}, {c.time_s:.2f} s: {why}")
    first = s.compile.frames.get(late[0].frame_id)
    return [Finding(
        id="late-compiles", rule="late-compiles", severity="warning",
        title=f"{len(late)} compile(s) happened in steady state, after step {k}",
        file=first.loc.file if first else None, line=first.loc.line if first else None,
        detail="Each compile stalls the loop for its full compile time, long after warm-up should have ended.",
        evidence=evidence,
        fix=("Warm up every input shape and mode the loop will meet before timing or serving it (run each once); "
             "mark changing dims dynamic (torch._dynamo.mark_dynamic) or bucket them to a few sizes."),
        rank=len(late),
    )]


def rule_spikes(s: Session) -> list[Finding]:
    series = s.steps.current
    if series is None or len(series) < 5:
        return []
    st = series.stats()
    p50 = st.p50_ms
    if not p50:
        return []
    threshold = max(SPIKE_FACTOR * p50, p50 + SPIKE_MIN_MS)
    spans = [c.span for c in s.compile.compiles]
    marked = series.compile_marked(spans)
    spikes = []
    for k in range(1, len(series)):
        v = series.interval_ms(k)
        if v == v and v > threshold:
            spikes.append((k, v))
    if not spikes:
        return []
    by_compile = [(k, v) for k, v in spikes if k in marked]
    other = [(k, v) for k, v in spikes if k not in marked]
    out = []
    if by_compile:
        after_warmup = [(k, v) for k, v in by_compile if k > 3]
        out.append(Finding(
            id="spikes:compile", rule="step-spikes",
            severity="warning" if after_warmup else "info",
            title=f"{len(by_compile)} slow step(s) paid for a compile (p50 {p50:.1f} ms)",
            detail=("Compiles inside the step loop show up as slow steps; after warm-up each one is a recompile "
                    "that a stable input would have avoided." if after_warmup else
                    "Only the first steps paid for compiles: that is warm-up."),
            evidence=[f"step {k}: {v:.1f} ms" for k, v in sorted(by_compile, key=lambda x: -x[1])[:8]],
            fix=("Find the recompile reasons of those steps (Events pane / report frames) and remove their cause; "
                 "warm up before measuring."),
            rank=len(by_compile),
        ))
    if other:
        out.append(Finding(
            id="spikes:other", rule="step-spikes", severity="info",
            title=f"{len(other)} slow step(s) not explained by compiles (p50 {p50:.1f} ms)",
            detail="Likely data loading stalls, garbage collection, checkpointing, logging or host synchronisation.",
            evidence=[f"step {k}: {v:.1f} ms" for k, v in sorted(other, key=lambda x: -x[1])[:8]],
            fix=("Check the data pipeline (DataLoader num_workers, pin_memory, persistent_workers), periodic work "
                 "(checkpoints, evaluation, logging that calls .item()), and gc (gc.freeze() after set-up)."),
            rank=len(other) / 10,
        ))
    return out


def _cudagraph_fix(reason: str) -> str:
    low = reason.lower()
    if "cpu" in low:
        return ("A CPU tensor or CPU op is part of the graph: move it to the GPU before the compiled call "
                "(or out of the compiled region) so the whole graph can be captured.")
    if "mutat" in low:
        return ("The graph mutates one of its inputs in place: avoid in-place updates of inputs inside the compiled "
                "function, or make the mutated tensor a module buffer/parameter.")
    if "dynamic" in low or "symint" in low or "shape" in low:
        return ("Dynamic shapes defeat CUDA graphs: keep shapes static (pad/bucket) or accept one graph per shape "
                "(torch._inductor.config.triton.cudagraph_skip_dynamic_graphs).")
    if "incompatible op" in low or "op" in low:
        return "An op that cannot be captured is in the graph: move it outside the compiled region."
    return "See PyTorch's reason; reduce-overhead gives no speed-up for the skipped graphs."


def rule_cudagraphs(s: Session) -> list[Finding]:
    out = []
    for reason, n in s.compile.cudagraph_skips.most_common():
        out.append(Finding(
            id=f"cudagraphs-skipped:{reason[:60]}", rule="cudagraphs", severity="warning",
            title=f"CUDA graphs skipped {n}×: {reason.splitlines()[0][:120]}",
            detail="mode='reduce-overhead' only helps graphs it can capture; these run without CUDA graphs.",
            evidence=[reason[:500]], fix=_cudagraph_fix(reason), rank=n,
        ))
    return out


def rule_idle_gpu(s: Session) -> list[Finding]:
    series = s.steps.current
    if series is None or len(series) < 10:
        return []
    start = _steady_start(s)
    t0 = start[1] if start else series.times[min(2, len(series) - 1)]
    t1 = series.times[-1]
    utils = []
    used_gpu = bool(s.meta.devices)
    for ev in s.samples:
        t = ev.get("t")
        gpus = ev.get("gpus")
        if not isinstance(t, (int, float)) or not isinstance(gpus, list) or not (t0 <= t <= t1):
            continue
        vals = []
        for g in gpus:
            if not isinstance(g, dict):
                continue
            if isinstance(g.get("proc_mem"), int) and g["proc_mem"] > 0:
                used_gpu = True
            u = g.get("util")
            if isinstance(u, (int, float)):
                vals.append(float(u))
        if vals:
            utils.append(max(vals))
    if not used_gpu or len(utils) < IDLE_MIN_SAMPLES:
        return []
    mean = sum(utils) / len(utils)
    if mean >= IDLE_UTIL:
        return []
    return [Finding(
        id="gpu-idle", rule="gpu-idle", severity="warning",
        title=f"The GPU was mostly idle while steps ran (utilisation {mean:.0f}% on average)",
        detail=("The loop is input-bound or host-bound: the GPU waits for data, for Python between kernels, or for "
                "synchronisations."),
        evidence=[f"{len(utils)} samples during the step loop; utilisation min {min(utils):.0f}%, max {max(utils):.0f}%",
                  f"step p50 {series.stats().p50_ms or 0:.2f} ms"],
        fix=("Feed it faster: DataLoader(num_workers=N, pin_memory=True, persistent_workers=True) and "
             ".to(device, non_blocking=True); remove .item()/print of tensors from the loop; if kernel launches "
             "dominate small steps, try mode='reduce-overhead' (CUDA graphs) or a larger batch."),
        rank=100 - mean,
    )]


RULES = (rule_compile_cost, rule_late_compiles, rule_spikes, rule_cudagraphs, rule_idle_gpu)
