"""Does the GPU panel agree with nvidia-smi? (Run on a machine with NVIDIA GPUs.)

For each round this script

1. takes a sample with ctmon's real sampler (``ctmon/samplers/gpu.py``, NVML),
2. runs, right after it,
   ``nvidia-smi --query-gpu=utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits``
   (line i is GPU i: both number GPUs in PCI bus order),
3. renders the TUI headless (160x48) on that sample, as a ``sample`` event
   through the real store, and reads back the GPU panel: the numbers it draws
   and its text,

and prints one JSON object: per round and GPU the panel's utilisation and
memory next to nvidia-smi's, their differences, and whether they agree.

    python benchmarks/gpu/panel_check.py                 # 5 rounds, 1 s apart
    python benchmarks/gpu/panel_check.py --burn          # keep the GPUs busy meanwhile (needs torch with CUDA)
    python benchmarks/gpu/panel_check.py --rounds 10 --interval 0.5

Agreement: utilisation within --util-tol percentage points (NVML averages it
over its own sample period, so two reads ~0.1 s apart can differ a little on
a busy GPU), memory used within --mem-tol-mib MiB or 1% of the total
(the panel shows GiB with one decimal: 51 MiB of rounding), memory total
within 1 MiB after nvidia-smi's MiB rounding. If nvidia-smi leaves the
driver's reserved memory out of "used" while NVML's v1 call counts it, the
difference is reported as ``reserved_mib`` where the driver tells it.

Exit status: 0 all agree, 1 some disagree, 2 the check could not run (the
JSON says why: no NVML, no nvidia-smi, no GPU, textual not installed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import harness  # noqa: E402

SMI_QUERY = ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used,memory.total", "--format=csv,noheader,nounits"]
MIB = 1 << 20


def fail(reason: str, **extra: Any) -> int:
    print(json.dumps({"ok": False, "ran": False, "reason": reason, **extra}, indent=2))
    return 2


def smi() -> tuple[list[dict[str, float | None]], str]:
    out = subprocess.run(SMI_QUERY, capture_output=True, text=True, timeout=20)
    if out.returncode != 0:
        raise RuntimeError(f"nvidia-smi exited with {out.returncode}: {out.stderr.strip()[:300]}")
    rows = []
    for line in out.stdout.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        vals: list[float | None] = []
        for p in parts[:3]:
            try:
                vals.append(float(p))
            except ValueError:  # "[N/A]", "[Not Supported]"
                vals.append(None)
        while len(vals) < 3:
            vals.append(None)
        rows.append({"util_pct": vals[0], "mem_used_mib": vals[1], "mem_total_mib": vals[2]})
    return rows, out.stdout


def reserved_mib(index: int) -> float | None:
    """The driver's reserved memory, when NVML's v2 memory call exists."""
    try:
        import pynvml  # type: ignore[import-untyped]

        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        info = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
        return float(info.reserved) / MIB
    except Exception:
        return None


async def render_panel(sample: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    from ctmon.read.feeds import ListFeed
    from ctmon.tui.app import CtmonApp
    from ctmon.tui.panels import GpuPanel
    from ctmon.tui.testing import wait_loaded

    now = sample["t"]
    events = [
        {"kind": "session", "t": now - 1.0, "v": 1, "command": ["gpu_panel_check"], "host": socket.gethostname()},
        sample,
    ]
    app = CtmonApp(ListFeed(events))
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_loaded(pilot)
        assert app.main is not None
        panel = app.main.query_one(GpuPanel)
        return panel.gpu_rows(), panel.render_text().plain


def compare(
    panel: dict[str, Any], ref: dict[str, float | None], text: str, args: argparse.Namespace, reserved: float | None
) -> dict[str, Any]:
    from ctmon.tui import fmt

    p_util = panel.get("util")
    p_used = panel["mem_used"] / MIB if panel.get("mem_used") is not None else None
    p_total = panel["mem_total"] / MIB if panel.get("mem_total") is not None else None
    out: dict[str, Any] = {
        "index": panel.get("index"),
        "name": panel.get("name"),
        "panel": {"util_pct": p_util, "mem_used_mib": _r(p_used), "mem_total_mib": _r(p_total)},
        "smi": ref,
        "diff": {},
        "shown": {},
    }
    checks = []
    if p_util is not None and ref["util_pct"] is not None:
        d = p_util - ref["util_pct"]
        out["diff"]["util_pct"] = _r(d)
        checks.append(abs(d) <= args.util_tol)
    if p_used is not None and ref["mem_used_mib"] is not None:
        d = p_used - ref["mem_used_mib"]
        out["diff"]["mem_used_mib"] = _r(d)
        tol = max(args.mem_tol_mib, 0.01 * (p_total or 0))
        ok = abs(d) <= tol
        if not ok and reserved is not None and abs(d - reserved) <= tol:
            ok = True
            out["diff"]["explained_by_reserved"] = True
        if reserved is not None:
            out["diff"]["reserved_mib"] = _r(reserved)
        checks.append(ok)
    if p_total is not None and ref["mem_total_mib"] is not None:
        d = p_total - ref["mem_total_mib"]
        out["diff"]["mem_total_mib"] = _r(d)
        checks.append(abs(d) <= 1.0 or (reserved is not None and abs(d - reserved) <= 1.0))
    # what the panel draws must be these numbers
    util_s = fmt.pct(p_util)
    mem_1 = f"{fmt.gib(panel.get('mem_used'))}/{fmt.gib(panel.get('mem_total'))} GiB"
    mem_0 = f"{fmt.gib(panel.get('mem_used'), 0)}/{fmt.gib(panel.get('mem_total'), 0)}G"
    out["shown"] = {
        "util": util_s in text,
        "memory": mem_1 in text or mem_0 in text or f"{fmt.gib(panel.get('mem_used'), 0):>3}" in text,
    }
    checks += list(out["shown"].values())
    out["agree"] = bool(checks) and all(checks)
    return out


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 1)


def burn() -> subprocess.Popen[bytes] | None:
    code = (
        "import torch,time\n"
        "xs=[torch.randn(8192,8192,device=f'cuda:{i}') for i in range(torch.cuda.device_count())]\n"
        "t=time.time()\n"
        "while time.time()-t<600:\n"
        "    [x@x for x in xs]\n"
    )
    try:
        return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:
        return None


def main() -> int:
    ap = harness.parser(__doc__)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--util-tol", type=float, default=10.0, help="percentage points (default 10)")
    ap.add_argument("--mem-tol-mib", type=float, default=256.0, help="MiB (default 256, or 1%% of the total)")
    ap.add_argument("--burn", action="store_true", help="run a matmul loop on every GPU meanwhile (torch with CUDA)")
    args = ap.parse_args()

    try:
        import textual  # noqa: F401
    except ImportError:
        return fail("textual is not installed (pip install textual, or carry its wheels)")
    if shutil.which("nvidia-smi") is None:
        return fail("nvidia-smi not found on PATH")
    from ctmon.samplers.gpu import GpuSampler

    sampler = GpuSampler()
    if not sampler.available:
        return fail(f"NVML: {sampler.error}")
    burner = burn() if args.burn else None
    if burner is not None:
        time.sleep(5.0)  # CUDA start-up, and a few busy NVML sample periods
    rounds = []
    try:
        for k in range(args.rounds):
            if k:
                time.sleep(args.interval)
            t0 = time.time()
            gpus = sampler.sample([os.getpid()] + ([burner.pid] if burner is not None else []))
            t1 = time.time()
            try:
                ref, raw = smi()
            except (OSError, RuntimeError, subprocess.TimeoutExpired) as e:
                return fail(f"nvidia-smi failed: {e}")
            t2 = time.time()
            sample = {"kind": "sample", "t": t0, "gpus": gpus}
            panel_rows, text = asyncio.run(render_panel(sample))
            per_gpu = []
            for i, row in enumerate(panel_rows):
                if i >= len(ref):
                    per_gpu.append({"index": row.get("index"), "agree": False, "why": "nvidia-smi lists fewer GPUs"})
                    continue
                per_gpu.append(compare(row, ref[i], text, args, reserved_mib(i)))
            rounds.append(
                {
                    "round": k,
                    "nvml_to_smi_s": round(t2 - t1, 3),
                    "gpus": per_gpu,
                    "gpu_count": {"panel": len(panel_rows), "smi": len(ref)},
                    "panel_text": text,
                    "smi_raw": raw.strip(),
                }
            )
    finally:
        if burner is not None:
            burner.terminate()
        sampler.close()
    ok = all(r["gpu_count"]["panel"] == r["gpu_count"]["smi"] and all(g["agree"] for g in r["gpus"]) for r in rounds)
    print(
        json.dumps(
            {
                "ok": ok,
                "ran": True,
                "host": socket.gethostname(),
                "driver": getattr(sampler, "driver", None),
                "gpus": sampler.names,
                "tolerances": {"util_pct": args.util_tol, "mem_used_mib": args.mem_tol_mib, "mem_total_mib": 1.0},
                "burn": bool(burner),
                "rounds": rounds,
            },
            indent=2,
        )
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
