"""GPU-only checks for ctmon, run on a CUDA machine (CI has no GPU).

  timing       step times of a compiled training loop that never syncs, as
               ctmon measures them (CUDA events resolved later), against the
               same loop synchronised every step and timed on the host.
  events       the GPU-only events ctmon must show: Triton autotuning and
               cudagraphs (reduce-overhead, including a forced skip).
  trace-names  which structured-trace records PyTorch emits on this GPU for
               each mode (what the hook can rely on).
  costs        host cost of the CUDA calls the hook makes, and of an NVML sample.

Every sub-command prints JSON; --out DIR also writes it (and recordings) there.
Usage: python benchmarks/gpu/check.py {timing,events,trace-names,costs,all} [--out DIR]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import harness  # noqa: E402


def _ctmon(*args: str) -> subprocess.CompletedProcess[str]:
    return harness.run(harness.ctmon_cmd(*args))


# ------------------------------------------------------------------ timing

TRAIN = r"""
import json, sys, time, torch
width, steps, sync, mode, batch = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "sync", sys.argv[4], int(sys.argv[5])
torch.manual_seed(0)
layers = []
for _ in range(4):
    layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
model = torch.nn.Sequential(*layers).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
cmodel = torch.compile(model, mode=None if mode == "default" else mode)
x = torch.randn(batch, width, device="cuda")
times = []
mark = steps // 5
for i in range(steps):
    if i == mark:
        torch.cuda.synchronize()
        t_mark = time.perf_counter()
    t0 = time.perf_counter()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = cmodel(x).float().pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if sync:
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1000)
torch.cuda.synchronize()
# throughput over the steady part: one sync before, one after, none between
steady_ms = (time.perf_counter() - t_mark) / (steps - mark) * 1000
print("SELF " + json.dumps({"intervals_ms": times, "steady_mean_ms": steady_ms}))
"""


def timing(out_dir: str) -> dict:
    script = os.path.join(out_dir, "train_timing.py")
    with open(script, "w") as f:
        f.write(TRAIN)
    results = {}
    for label, width, batch, steps in (("~1ms", 2048, 4096, 1500), ("~10ms", 4096, 16384, 300)):
        rec = os.path.join(out_dir, f"timing_{label.strip('~')}.jsonl")
        run = _ctmon("record", "-q", "-o", rec, script, str(width), str(steps), "nosync", "default", str(batch))
        if run.returncode != 0:
            raise RuntimeError(run.stderr[-3000:])
        rep = harness.report(rec)
        sync = subprocess.run(
            [sys.executable, script, str(width), str(steps), "sync", "default", str(batch)],
            capture_output=True,
            text=True,
            env=harness.env(),
            timeout=900,
        )
        own = json.loads([ln for ln in sync.stdout.splitlines() if ln.startswith("SELF ")][0][5:])["intervals_ms"]
        steady = own[len(own) // 5 :]  # after warm-up and compiles
        sync_p50 = statistics.median(steady)
        st = rep["steps"]
        # the unsynchronised run's own throughput (sync only around the steady part)
        with open(rec) as f:
            outs = "".join(json.loads(ln).get("data", "") for ln in f if '"kind":"output"' in ln)
        thr = json.loads([ln for ln in outs.splitlines() if ln.startswith("SELF ")][0][5:])["steady_mean_ms"]
        results[label] = {
            "width": width,
            "batch": batch,
            "steps": steps,
            "ctmon_p50_ms": st["p50_ms"],
            "ctmon_mean_ms": st["mean_ms"],
            "ctmon_device_timed": st["device_timed"],
            "ctmon_count": st["count"],
            "sync_p50_ms": round(sync_p50, 4),
            "diff_pct": round((st["p50_ms"] - sync_p50) / sync_p50 * 100, 2),
            "nosync_throughput_ms": round(thr, 4),
            "diff_vs_throughput_pct": round((st["p50_ms"] - thr) / thr * 100, 2),
        }
    return results


# ------------------------------------------------------------------ events

MODES = r"""
import sys, torch
mode = sys.argv[1]
torch.manual_seed(0)
class Net(torch.nn.Module):
    def __init__(s):
        super().__init__()
        s.a = torch.nn.Linear(512, 2048); s.b = torch.nn.Linear(2048, 512)
    def forward(s, x):
        return s.b(torch.relu(s.a(x)))
net = Net().cuda()
opt = torch.optim.SGD(net.parameters(), lr=1e-3)
cnet = torch.compile(net, mode=None if mode == "default" else mode)
def mixed(x, counts):
    # `counts` is a plain tensor (not a parameter or buffer) updated in place:
    # cudagraph trees cannot replay that, so reduce-overhead skips this graph
    # (PyTorch: "skipping cudagraphs due to mutated inputs")
    counts.add_(x.sum(0)[:4])
    return x * 2
cmixed = torch.compile(mixed, mode=None if mode == "default" else mode)
counts = torch.zeros(4, device="cuda")
for i in range(30):
    x = torch.randn(64, 512, device="cuda")
    cnet(x).sum().backward()
    opt.step(); opt.zero_grad(set_to_none=True)
    cmixed(x, counts)
torch.cuda.synchronize()
print("ok")
"""


def events(out_dir: str) -> dict:
    script = os.path.join(out_dir, "modes.py")
    with open(script, "w") as f:
        f.write(MODES)
    modes = ("default", "reduce-overhead")  # max-autotune: see benchmarks/gpu/modes.py
    procs = {}
    for mode in modes:  # in parallel: compiles are CPU-bound and GPU hosts have cores to spare
        rec = os.path.join(out_dir, f"modes_{mode}.jsonl")
        env = harness.env(TORCHINDUCTOR_CACHE_DIR=tempfile.mkdtemp(prefix="inductor-"))
        procs[mode] = (
            rec,
            subprocess.Popen(
                [sys.executable, "-m", "ctmon", "record", "-q", "-o", rec, script, mode],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            ),
        )
    out = {}
    for mode, (rec, p) in procs.items():
        _, err = p.communicate(timeout=900)
        rep = harness.report(rec)
        kinds: dict[str, int] = {}
        with open(rec) as f:
            for line in f:
                k = json.loads(line)["kind"]
                kinds[k] = kinds.get(k, 0) + 1
        out[mode] = {
            "rc": p.returncode,
            "stderr_tail": err[-600:] if p.returncode else "",
            "event_kinds": kinds,
            "compile": rep["compile"],
            "cache": rep["cache"],
            "cudagraphs": rep["cudagraphs"],
            "frames": [(f["name"], f["compiles"]) for f in rep["frames"]],
            "steps": {k: rep["steps"][k] for k in ("count", "p50_ms", "device_timed")},
            "devices": rep["devices"],
        }
    return out


# ------------------------------------------------------------- trace names

DUMP = r"""
import json, logging, runpy, sys
names = {}
samples = {}
class H(logging.Handler):
    def emit(self, r):
        md = getattr(r, "metadata", {}) or {}
        name = next(iter(md), "?")
        if name == "artifact":
            name = "artifact:" + str(md["artifact"].get("name"))
        names[name] = names.get(name, 0) + 1
        low = name.lower()
        if any(k in low for k in ("triton", "autotun", "cudagraph", "cache", "kernel")) and name not in samples:
            pl = getattr(r, "payload", None)
            samples[name] = {"md": json.dumps(md, default=str)[:1500], "payload": (pl or "")[:3000]}
        if name == "compilation_metrics":
            skip = md["compilation_metrics"].get("cudagraph_skip_reason")
            if skip:
                samples.setdefault("cudagraph_skip_reasons", []).append(skip[:500])
lg = logging.getLogger("torch.__trace"); lg.addHandler(H()); lg.setLevel(logging.DEBUG)
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    print("DUMP " + json.dumps({"names": names, "samples": samples}))
"""


def trace_names(out_dir: str) -> dict:
    dump = os.path.join(out_dir, "dump.py")
    with open(dump, "w") as f:
        f.write(DUMP)
    script = os.path.join(out_dir, "modes.py")
    if not os.path.exists(script):
        with open(script, "w") as f:
            f.write(MODES)
    out = {}
    for mode in ("default", "reduce-overhead", "max-autotune-no-cudagraphs"):
        cache = tempfile.mkdtemp(prefix="inductor-")
        run = subprocess.run(
            [sys.executable, dump, script, mode],
            capture_output=True,
            text=True,
            env=harness.env(TORCHINDUCTOR_CACHE_DIR=cache),
            timeout=900,
        )
        lines = [ln for ln in run.stdout.splitlines() if ln.startswith("DUMP ")]
        out[mode] = json.loads(lines[0][5:]) if lines else {"error": run.stderr[-2000:]}
    return out


# ------------------------------------------------------------------- costs


def costs() -> dict:
    import torch

    from ctmon.samplers.gpu import GpuSampler

    torch.cuda.init()
    x = torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    n = 2000

    def per_call(fn) -> float:  # type: ignore[no-untyped-def]
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn()
        return (time.perf_counter_ns() - t0) / n

    evs = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    create = per_call(lambda: torch.cuda.Event(enable_timing=True))
    it = iter(evs)
    record = per_call(lambda: next(it).record())
    torch.cuda.synchronize()
    it = iter(evs)
    query = per_call(lambda: next(it).query())
    launch = per_call(lambda: x.add_(1))
    torch.cuda.synchronize()
    g = GpuSampler()
    g.sample([os.getpid()])
    t0 = time.perf_counter_ns()
    for _ in range(200):
        g.sample([os.getpid()])
    nvml = (time.perf_counter_ns() - t0) / 200
    return {
        "event_create_us": round(create / 1000, 2),
        "event_record_us": round(record / 1000, 2),
        "event_query_us": round(query / 1000, 2),
        "kernel_launch_us": round(launch / 1000, 2),
        "nvml_sample_us": round(nvml / 1000, 1),
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
    }


def main() -> None:
    ap = harness.parser(__doc__)
    ap.add_argument("what", choices=["timing", "events", "trace-names", "costs", "all"])
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    out_dir = a.out or tempfile.mkdtemp(prefix="ctmon-gpu-")
    os.makedirs(out_dir, exist_ok=True)
    res: dict[str, object] = {"date": time.strftime("%Y-%m-%d %H:%M")}
    todo = ["costs", "trace-names", "events", "timing"] if a.what == "all" else [a.what]
    for what in todo:
        t0 = time.time()
        try:
            res[what] = {
                "costs": costs,
                "timing": lambda: timing(out_dir),
                "events": lambda: events(out_dir),
                "trace-names": lambda: trace_names(out_dir),
            }[what]()
        except (Exception, SystemExit) as e:  # keep going: one failing check must not hide the others
            res[what] = {"error": f"{type(e).__name__}: {e}"[:3000]}
        res[f"{what}_seconds"] = round(time.time() - t0, 1)
        print(f"[{what}] done in {res[f'{what}_seconds']} s", file=sys.stderr, flush=True)
    text = json.dumps(res, indent=2)
    with open(os.path.join(out_dir, "gpu_check.json"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
