"""Demo 4 -- compile caches across restarts: cold on every start, or warm.

A GPT evaluation/serving process starts, compiles the model and runs
batches. Every real deployment restarts it: new job, preemption, crash,
autoscaling, a new container. torch.compile keeps what it compiled in
on-disk caches under TORCHINDUCTOR_CACHE_DIR -- the FX graph cache
(Inductor's generated code) and the AOTAutograd cache -- so a restart with
the same model and shapes can skip most of the compile. Unless the cache is
empty on every start: a fresh container without a persistent volume, a
per-job temporary directory, /tmp cleaned between runs, or
TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 left over from debugging.

Default run (the anti-pattern): the demo points TORCHINDUCTOR_CACHE_DIR at a
fresh temporary directory on every start (and deletes it at exit), so every
run misses both caches and pays the full compile again.

--fix: a persistent cache dir (--cache-dir; default $CTMON_DEMO_CACHE_DIR or
~/.cache/ctmon-demo-inductor). The first run misses and fills it; run the
same command again and the second run hits: FX graph and AOTAutograd hits,
no misses, and a much shorter first batch. In practice: keep
TORCHINDUCTOR_CACHE_DIR on a volume that survives restarts.

--portable DIR: the caches as a file you can ship ("Mega-Cache"). If DIR has
no artifacts yet, the run compiles as usual and then saves everything it
compiled with ``torch.compiler.save_cache_artifacts()`` into DIR. Any later
run starts from a fresh, empty cache dir -- as a new machine or container
would -- and calls ``torch.compiler.load_cache_artifacts()`` before the first
compile: the compile then hits both caches. (On CPU Inductor still has to
rebuild its C++ kernels from the cached source in the new cache dir, so the
time saved is smaller than with a persistent dir; on CUDA the Triton kernels
travel inside the artifacts.)

In ctmon: the Caches panel -- FX graph and AOTAutograd hit/miss counts and
the cache dir; the report's cache.fx_graph / cache.aot_autograd. The
Compiles panel shows the compile time of the first call shrinking on a hit.

This demo needs Inductor (the other backends have no FX graph cache).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import time

T_START = time.perf_counter()  # before torch is imported: time to first batch includes it

from _common import add_common_args, describe, finish_common_args, fmt_s, parser  # noqa: E402

ARTIFACTS_FILE = "torch_compile_artifacts.bin"
DEFAULT_CACHE_DIR = os.environ.get("CTMON_DEMO_CACHE_DIR") or os.path.join(
    os.path.expanduser("~"), ".cache", "ctmon-demo-inductor")


def main() -> None:
    p = parser(__doc__)
    add_common_args(p, steps_help="inference batches",
                    fix_help="use a persistent cache dir (--cache-dir), so a restart hits the caches")
    p.add_argument("--cache-dir", default=DEFAULT_CACHE_DIR,
                   help="the persistent cache dir of --fix (default: $CTMON_DEMO_CACHE_DIR or %(default)s)")
    p.add_argument("--portable", metavar="DIR",
                   help="save the compiled artifacts into DIR (first run), or load them from DIR into a fresh cache")
    p.add_argument("--batch-size", type=int, default=None, help="default: 8 on cpu, 32 on cuda")
    p.add_argument("--seq-len", type=int, default=None, help="default: 64 on cpu, 512 on cuda")
    args = finish_common_args(p.parse_args(), cpu_steps=20, cuda_steps=100)
    if args.backend != "inductor":
        p.error("this demo is about Inductor's compile caches: use --backend inductor (the default)")

    # ---- The cache dir is chosen before torch is imported. ----
    artifacts = os.path.join(args.portable, ARTIFACTS_FILE) if args.portable else None
    load_artifacts = artifacts is not None and os.path.exists(artifacts)
    if args.fix and not load_artifacts:
        cache_dir = os.path.abspath(os.path.expanduser(args.cache_dir))
        os.makedirs(cache_dir, exist_ok=True)
        kind = "persistent"
    else:
        # THE ANTI-PATTERN (and, with --portable, a stand-in for a brand-new
        # machine): a fresh, empty cache dir on every start, removed at exit,
        # like a container without a persistent volume. Nothing compiled in
        # an earlier run can be found.
        cache_dir = tempfile.mkdtemp(prefix="ctmon-demo-fresh-cache-")
        atexit.register(shutil.rmtree, cache_dir, True)
        kind = "fresh (empty)"
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache_dir
    os.environ.pop("TORCHINDUCTOR_FORCE_DISABLE_CACHES", None)  # the caches themselves stay on

    import torch
    from _tinygpt import GPT, SyntheticText, autocast, model_config, resolve_device, sync

    device = resolve_device(p, args)
    on_cuda = device.type == "cuda"
    B = args.batch_size or (32 if on_cuda else 8)
    T = args.seq_len or (512 if on_cuda else 64)
    print(f"cache_restart: {kind} cache dir {cache_dir}")

    if load_artifacts:
        with open(artifacts, "rb") as f:
            info = torch.compiler.load_cache_artifacts(f.read())
        n = sum(len(v) for v in info.artifacts.values()) if info is not None else 0
        print(f"loaded {n} cache artifacts from {artifacts} before compiling")

    torch.manual_seed(args.seed)
    cfg = model_config(device, block_size=max(T, 128))
    model = GPT(cfg).to(device).eval()
    cmodel = torch.compile(model, backend=args.backend)
    data = SyntheticText(cfg.vocab_size, seed=args.seed)
    print(f"{model.num_params() / 1e6:.2f}M params, batch {B} x {T}, device {device.type}, {args.steps} batches")

    times: list[float] = []
    with torch.inference_mode():
        for step in range(1, args.steps + 1):
            x, _ = data.batch(B, T, device)
            t0 = time.perf_counter()
            with autocast(device):
                cmodel(x)
            sync(device)
            times.append(time.perf_counter() - t0)
            if step == 1:
                print(f"batch {step:4d}/{args.steps}  {fmt_s(times[0])} (compile)  "
                      f"-- first result {fmt_s(time.perf_counter() - T_START)} after the script started")
            elif step % args.log_every == 0 or step == args.steps:
                print(f"batch {step:4d}/{args.steps}  {fmt_s(times[-1])}  {B * T / times[-1]:,.0f} tokens/s")

    if artifacts is not None and not load_artifacts:
        saved = torch.compiler.save_cache_artifacts()
        if saved is None:
            print("nothing to save: no artifacts were recorded")
        else:
            blob, info = saved
            os.makedirs(args.portable, exist_ok=True)
            tmp = artifacts + ".tmp"
            with open(tmp, "wb") as f:
                f.write(blob)
            os.replace(tmp, artifacts)
            n = sum(len(v) for v in info.artifacts.values())
            print(f"saved {n} cache artifacts ({len(blob) / 1e6:.1f} MB) to {artifacts}")

    print(f"summary: first batch {fmt_s(times[0])} (compile); later batches {describe(times[1:])}; "
          f"{cache_counts()}")


def cache_counts() -> str:
    """Inductor's own hit/miss counters (torch._dynamo.utils.counters: internal, best effort)."""
    try:
        from torch._dynamo.utils import counters

        ind, aot = counters["inductor"], counters["aot_autograd"]
        return (f"FX graph cache {ind['fxgraph_cache_hit']} hit / {ind['fxgraph_cache_miss']} miss, "
                f"AOTAutograd cache {aot['autograd_cache_hit']} hit / {aot['autograd_cache_miss']} miss")
    except Exception:
        return "cache counters unavailable"


if __name__ == "__main__":
    main()
