#!/usr/bin/env bash
# PyTorch's own trace of a CUDA run (Inductor, Triton kernels), read by ctmon:
# `ctmon report DIR --json` beside an independent count over the log, and the
# Perfetto export of it. $1: a folder of wheels to install first.
set -u
OUT="${OUT:-./gpu-results}"
mkdir -p "$OUT"
if [ -n "${1:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/ctmon-site "$1"/*.whl \
    && export PYTHONPATH="$PWD:/tmp/ctmon-site"
fi
rm -rf /tmp/tt-gpu
TORCH_TRACE=/tmp/tt-gpu timeout 300 python3 tests/workloads/graph_breaks.py > /dev/null 2>&1   # aot_eager, on the CPU
TORCH_TRACE=/tmp/tt-gpu timeout 300 python3 - <<'PY'
import torch
m = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)).cuda()
opt = torch.optim.AdamW(m.parameters())
c = torch.compile(m)
for bs in (64, 64, 96, 128):
    c(torch.randn(bs, 512, device="cuda")).sum().backward(); opt.step(); opt.zero_grad()
torch.cuda.synchronize(); print("gpu run ok")
PY
python3 -m ctmon report /tmp/tt-gpu --json > "$OUT/trace_report.json"; echo "report rc=$?"
python3 -m ctmon export --perfetto /tmp/tt-gpu -o "$OUT/trace_perfetto.json"; echo "export rc=$?"
python3 - "$OUT" <<'PY'
import glob, json, sys
out = sys.argv[1]
r = json.load(open(f"{out}/trace_report.json"))
n = {"compilation_metrics": 0, "bwd_compilation_metrics": 0, "dynamo_graph_break_reason": 0, "fx_graph_cache_miss": 0, "fx_graph_cache_hit": 0}
for path in glob.glob("/tmp/tt-gpu/*.log"):
    for line in open(path, errors="replace"):
        if line.startswith("\t"):
            continue
        for k in n:
            if f'"{k}"' in line:
                n[k] += 1
c = r["compile"]
print("ctmon:", c["compiles"], c["backward_compiles"], c["recompiles"], c["graph_breaks"], r["cache"]["fx_graph"], c["phases_s"])
print("trace:", n)
ev = json.load(open(f"{out}/trace_perfetto.json"))["traceEvents"]
print("perfetto:", {ph: sum(1 for e in ev if e["ph"] == ph) for ph in "MXiC"}, "processes", sorted({e["args"]["name"] for e in ev if e["name"] == "process_name"}))
PY
