#!/usr/bin/env bash
# On the GPU: ctmon's sampled step-time shares per compiled region beside
# torch.profiler's on the same run (benchmarks/hotness_vs_profiler.py), and
# PyTorch's phase timers (autotuning included) read live by ctmon beside the
# same run's TORCH_TRACE. Results in $OUT.
# $1: a folder of wheels to install first (the GPU machine has no msgspec).
. "$(dirname "$0")/_gpu_env.sh" "${1:-}"
timeout 300 python3 benchmarks/hotness_vs_profiler.py --device cuda --steps 5000 --width 2048 --batch 1024 --glue 30 \
  > "$OUT/hotness.json" 2> "$OUT/hotness.err"
echo "== hotness rc=$?"; cat "$OUT/hotness.json"; grep -v USDT "$OUT/hotness.err" | tail -3
cat > /tmp/autotune_job.py <<'PY'
import torch
m = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024)).cuda()
f = torch.compile(m, mode="max-autotune-no-cudagraphs")
opt = torch.optim.SGD(m.parameters(), lr=1e-3)
for _ in range(5):
    f(torch.randn(512, 1024, device="cuda")).sum().backward()
    opt.step()
    opt.zero_grad()
PY
rm -rf /tmp/tt-at
TORCHINDUCTOR_CACHE_DIR=/tmp/ind-at TORCH_TRACE=/tmp/tt-at timeout 240 python3 -m ctmon record -q -o /tmp/at.jsonl /tmp/autotune_job.py \
  > /tmp/at.out 2>&1
echo "== autotune run rc=$?"
python3 - <<'PY'
import json, subprocess, sys
def phases(path):
    out = subprocess.run([sys.executable, "-m", "ctmon", "report", path, "--json"], capture_output=True, text=True)
    return json.loads(out.stdout)["compile"]["traced_phases_s"]
print("live (recording):", phases("/tmp/at.jsonl"))
print("TORCH_TRACE     :", phases("/tmp/tt-at"))
PY
