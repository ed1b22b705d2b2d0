"""Demo 5 -- torch.compile modes, measured: eager vs default vs
reduce-overhead vs max-autotune-no-cudagraphs.

One process trains the same GPT (same init, same batches) once per mode and
prints a table: the first step (which compiles), the extra time the warm-up
steps took over the steady state (compile, CUDA-graph recording,
autotuning), the steady step time (median after warm-up, timed with device
synchronisation), the speed-up over eager and, on CUDA, the peak memory.

What the modes do (Inductor):
  default                     fused Triton/C++ kernels; a fair compile time.
  reduce-overhead             the same kernels replayed through CUDA graphs:
                              removes per-kernel launch overhead (small
                              batches, many small kernels), costs memory
                              and needs static shapes. CUDA only.
  max-autotune-no-cudagraphs  benchmarks several GEMM/conv implementations
                              per shape at compile time: the longest compile,
                              sometimes the fastest steps.
(max-autotune = both autotuning and CUDA graphs.)

There is no mode that is best everywhere: it depends on the model, the
shapes, the GPU, and how long the run is (a compile that takes minutes pays
off only over enough steps). On CPU only eager and default are measured by
default: CUDA graphs need CUDA, and autotuning on CPU is slow.

In ctmon: the step-time chart has one plateau per mode (ctmon.step() marks
each timed step), with a spike at the start of each compiled mode; the
Compiles panel shows a compile per mode with its time; on CUDA the Caches
panel counts autotuned kernels (max-autotune) and the CUDA-graphs line shows
any cudagraph skips with their reason (reduce-overhead).

--fix: choose by measurement. After the table, the demo picks the mode with
the least projected time for a run of --plan-steps steps (warm-up overhead +
plan-steps x steady step), prints why, and trains --steps more steps with it
-- "use the mode the measurements favour", instead of a mode picked by
folklore.
"""

from __future__ import annotations

import statistics
import time

import torch
from _common import add_common_args, ctmon_step, finish_common_args, fmt_s, parser
from _tinygpt import GPT, SyntheticText, autocast, make_optimizer, model_config, resolve_device, sync

ALL_MODES = ("eager", "default", "reduce-overhead", "max-autotune-no-cudagraphs")
step_mark = ctmon_step()  # each timed step is a ctmon step


def build(mode: str, backend: str, cfg, device, seed: int):
    """A fresh model (same init for every mode), its optimizer, and the model compiled in ``mode``."""
    torch._dynamo.reset()  # each mode compiles from scratch in this process (on-disk caches stay)
    torch.manual_seed(seed)
    model = GPT(cfg).to(device)
    opt = make_optimizer(model, lr=6e-4 if device.type == "cuda" else 3e-3)
    if mode == "eager":
        return model, opt
    if backend == "inductor":
        return torch.compile(model, backend=backend, mode=mode), opt
    return torch.compile(model, backend=backend), opt


def train(mode: str, cmodel, opt, batches, steps: int, device, log_every: int, label: str):
    """Train ``steps`` steps; returns the device-synchronised time of each."""
    times: list[float] = []
    cudagraphs = mode in ("reduce-overhead", "max-autotune")
    for i in range(steps):
        x, y = batches[i % len(batches)]
        if cudagraphs:
            # A new iteration begins: outputs of the previous replay may be overwritten.
            torch.compiler.cudagraph_mark_step_begin()
        sync(device)
        t0 = time.perf_counter()
        with autocast(device):
            _, loss = cmodel(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync(device)
        times.append(time.perf_counter() - t0)
        step_mark()
        if i == 0 or (i + 1) % log_every == 0 or i + 1 == steps:
            print(f"  [{label}] step {i + 1:4d}/{steps}  loss {loss.item():.3f}  {fmt_s(times[-1])}")
    return times


def main() -> None:
    p = parser(__doc__)
    add_common_args(p, steps_help="training steps per mode",
                    fix_help="pick the mode the measurements favour and train with it")
    p.add_argument("--modes", default=None,
                   help="comma-separated, from: " + ", ".join(ALL_MODES)
                        + " (default: eager,default on cpu; all four on cuda)")
    p.add_argument("--warmup", type=int, default=None, metavar="N",
                   help="steps before the steady state is measured (default: 3 on cpu, 5 on cuda)")
    p.add_argument("--plan-steps", type=int, default=10_000, metavar="N",
                   help="length of the real run, for --fix's choice (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=None, help="default: 8 on cpu, 16 on cuda")
    p.add_argument("--seq-len", type=int, default=None, help="default: 64 on cpu, 512 on cuda")
    args = finish_common_args(p.parse_args(), cpu_steps=15, cuda_steps=50, log_lines=2)
    device = resolve_device(p, args)
    on_cuda = device.type == "cuda"
    modes = [m.strip() for m in (args.modes or ("all" if on_cuda else "eager,default")).split(",") if m.strip()]
    if modes == ["all"]:
        modes = list(ALL_MODES)
    for m in modes:
        if m not in ALL_MODES and m != "max-autotune":
            p.error(f"--modes: unknown mode {m!r} (choose from {', '.join(ALL_MODES)})")
        if m in ("reduce-overhead", "max-autotune") and not on_cuda:
            p.error(f"--modes: {m} uses CUDA graphs and needs --device cuda")
        if m not in ("eager", "default") and args.backend != "inductor":
            p.error(f"--modes: {m} is an Inductor mode; with --backend {args.backend} only eager and default apply")
    warmup = args.warmup if args.warmup is not None else (5 if on_cuda else 3)
    if args.steps <= warmup:
        p.error(f"--steps must be larger than --warmup ({warmup})")
    B = args.batch_size or (16 if on_cuda else 8)
    T = args.seq_len or (512 if on_cuda else 64)

    cfg = model_config(device, block_size=max(T, 128))
    data = SyntheticText(cfg.vocab_size, seed=args.seed)
    batches = [data.batch(B, T, device) for _ in range(8)]
    print(f"compile_modes: batch {B} x {T}, device {device.type}, backend {args.backend}, "
          f"{args.steps} steps per mode ({warmup} warm-up), modes: {', '.join(modes)}")

    rows = []
    for mode in modes:
        cmodel, opt = build(mode, args.backend, cfg, device, args.seed)
        if on_cuda:
            torch.cuda.reset_peak_memory_stats(device)
        times = train(mode, cmodel, opt, batches, args.steps, device, args.log_every, mode)
        steady = statistics.median(times[warmup:])
        rows.append({
            "mode": mode,
            "first": times[0],
            "overhead": max(0.0, sum(times[:warmup]) - warmup * steady),
            "steady": steady,
            "peak": torch.cuda.max_memory_allocated(device) if on_cuda else None,
        })
        del cmodel, opt
        if on_cuda:
            torch.cuda.empty_cache()

    eager = next((r["steady"] for r in rows if r["mode"] == "eager"), None)
    print()
    print(f"{'mode':<28} {'first step':>11} {'warm-up extra':>14} {'steady (p50)':>13} {'vs eager':>9} {'peak mem':>9}")
    for r in rows:
        speedup = f"{eager / r['steady']:.2f}x" if eager else "-"
        peak = f"{r['peak'] / 2**30:.2f} GiB" if r["peak"] is not None else "-"
        print(f"{r['mode']:<28} {fmt_s(r['first']):>11} {fmt_s(r['overhead']):>14} "
              f"{fmt_s(r['steady']):>13} {speedup:>9} {peak:>9}")

    def projected(r) -> float:
        return r["overhead"] + args.plan_steps * r["steady"]

    best = min(rows, key=projected)
    fastest = min(rows, key=lambda r: r["steady"])
    print(f"summary: fastest steady step: {fastest['mode']} ({fmt_s(fastest['steady'])}); "
          f"over a {args.plan_steps}-step run: {best['mode']} "
          f"(projected {fmt_s(projected(best))} incl. warm-up)")

    if args.fix:
        print(f"--fix: training {args.steps} steps with mode {best['mode']!r}, the one the measurements favour")
        cmodel, opt = build(best["mode"], args.backend, cfg, device, args.seed)
        times = train(best["mode"], cmodel, opt, batches, args.steps, device, args.log_every,
                      best["mode"] + ", chosen")
        print(f"summary (--fix): mode {best['mode']}: first step {fmt_s(times[0])}, "
              f"steady {fmt_s(statistics.median(times[warmup:]))}")


if __name__ == "__main__":
    main()
