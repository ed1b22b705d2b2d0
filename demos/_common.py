"""Command-line plumbing shared by the demos. Imports neither torch nor ctmon,
so a demo can parse its arguments (and set environment variables such as
``TORCHINDUCTOR_CACHE_DIR``) before torch is imported."""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable


def parser(doc: str | None) -> argparse.ArgumentParser:
    """An ArgumentParser whose description is the demo's docstring."""
    return argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)


def add_common_args(
    p: argparse.ArgumentParser,
    *,
    steps_help: str = "training steps",
    cpu_backend: str = "inductor",
    fix: bool = True,
    fix_help: str = "apply the practice that cures the problem",
) -> None:
    """--device, --steps, --backend, --log-every, --seed and (unless fix=False) --fix.

    ``cpu_backend`` is the backend used on CPU when --backend is not given.
    Demos whose point is many compiles (one per shape, one per graph piece)
    use ``aot_eager`` there: Dynamo behaves exactly as with Inductor, but each
    compile takes about a second instead of the 10-25 s that Inductor's C++
    compiler needs per new graph on a small CPU. With --device cuda the
    default is always inductor.
    """
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cpu: small sizes, fp32 (default); cuda: realistic sizes, bf16 autocast")
    p.add_argument("--steps", type=int, default=None, metavar="N",
                   help=f"{steps_help} (default depends on --device)")
    p.add_argument("--backend", default=None,
                   help=f"torch.compile backend (default: inductor; on cpu: {cpu_backend})")
    p.add_argument("--log-every", type=int, default=None, metavar="N",
                   help="print a progress line every N steps (default depends on --steps)")
    p.add_argument("--seed", type=int, default=0, help="seed of the model and the synthetic data")
    if fix:
        p.add_argument("--fix", action="store_true", help=fix_help)
    p.set_defaults(_cpu_backend=cpu_backend)


MODES = ("eager", "default", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune")


def add_mode_arg(p: argparse.ArgumentParser) -> None:
    """--mode: eager (no torch.compile) or a torch.compile mode, to compare them run by run."""
    p.add_argument("--mode", choices=MODES, default="default",
                   help="eager (no torch.compile) or the torch.compile mode (default: default)")


def compile_kwargs(args: argparse.Namespace) -> dict[str, object]:
    """torch.compile keyword arguments for --backend/--mode (a mode implies Inductor)."""
    mode = getattr(args, "mode", "default")
    if mode in (None, "default", "eager"):
        return {"backend": args.backend}
    return {"mode": mode}


def finish_common_args(args: argparse.Namespace, *, cpu_steps: int, cuda_steps: int,
                       log_lines: int = 8) -> argparse.Namespace:
    """Fill in the defaults that depend on --device."""
    if args.backend is None:
        args.backend = "inductor" if args.device == "cuda" else args._cpu_backend
    if args.steps is None:
        args.steps = cuda_steps if args.device == "cuda" else cpu_steps
    if args.steps < 1:
        raise SystemExit("--steps must be at least 1")
    if args.log_every is None:
        args.log_every = max(1, args.steps // log_lines)
    return args


def ctmon_step() -> Callable[[], None]:
    """``ctmon.step`` when ctmon is importable, else a no-op: the demos run without ctmon too."""
    try:
        import ctmon
    except ImportError:
        return lambda: None
    return ctmon.step


def fmt_s(seconds: float | None) -> str:
    """A duration for humans: '840 us', '12.3 ms', '1.25 s'."""
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} us"
    if seconds < 0.1:
        return f"{seconds * 1e3:.1f} ms"
    if seconds < 1.0:
        return f"{seconds * 1e3:.0f} ms"
    return f"{seconds:.2f} s"


def percentile(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    pos = (len(s) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def describe(times_s: list[float]) -> str:
    """'p50 12.3 ms, p90 15.0 ms, max 4.10 s' of a list of durations."""
    if not times_s:
        return "no steps"
    return (f"p50 {fmt_s(statistics.median(times_s))}, p90 {fmt_s(percentile(times_s, 0.9))}, "
            f"max {fmt_s(max(times_s))}")
