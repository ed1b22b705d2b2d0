#!/usr/bin/env bash
# What a user reads on library models, on a CUDA machine: each job of
# benchmarks/gpu_library_jobs.py under `ctmon record` with TORCH_TRACE set;
# one JSON per job in $OUT with ctmon's report (counts, frames, breaks,
# findings, steps, torch.compile calls) beside an independent count over
# PyTorch's own trace files of the same run. $1: a folder of wheels to
# install first (the GPU machine has no msgspec). JOBS="a b" runs only those.
set -u
OUT="${OUT:-./gpu-results}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if [ -n "${1:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/ctmon-site "$1"/*.whl \
    && export PYTHONPATH=/tmp/ctmon-site
fi
for job in ${JOBS:-gpt2-train llama-generate llama-generate-fixed llama-generate-dynamic generate-uncompiled}; do
  rm -rf "/tmp/tt-$job" "/tmp/rec-$job.jsonl"
  start=$(date +%s)
  TORCH_TRACE="/tmp/tt-$job" timeout 200 python3 -m ctmon record -o "/tmp/rec-$job.jsonl" \
    benchmarks/gpu_library_jobs.py "$job" > "/tmp/out-$job.txt" 2>&1
  echo "$job rc=$? $(( $(date +%s) - start )) s"
  python3 - "$job" "$OUT/$job.json" <<'PY'
import glob, json, subprocess, sys
job, dest = sys.argv[1], sys.argv[2]
rep = json.loads(subprocess.run([sys.executable, "-m", "ctmon", "report", f"/tmp/rec-{job}.jsonl", "--json"],
                                capture_output=True, text=True).stdout or "{}")
trace = {"compiles": 0, "dynamo_starts": 0, "graph_breaks": 0, "recompiles": 0}
for path in glob.glob(f"/tmp/tt-{job}/*.log"):
    for line in open(path, errors="replace"):
        if '"compilation_metrics"' in line[:400] and '"bwd_compilation_metrics"' not in line[:400]:
            trace["compiles"] += 1
        if '"dynamo_start"' in line[:400]:
            trace["dynamo_starts"] += 1
        if '"dynamo_graph_break_reason"' in line[:400]:
            trace["graph_breaks"] += 1
out = open(f"/tmp/out-{job}.txt", errors="replace").read()
keep = {k: rep.get(k) for k in ("compile", "steps", "generation", "compile_calls", "findings", "graph_breaks", "exit_code")}
keep["frames"] = [{k: f.get(k) for k in ("name", "file", "line", "called_from", "compiles", "recompiles")}
                  for f in rep.get("frames") or []]
json.dump({"job": job, "report": keep, "torch_trace": trace, "output_tail": out[-3000:]}, open(dest, "w"), indent=1)
c = rep.get("compile") or {}
print(job, "ctmon", {k: c.get(k) for k in ("compiles", "recompiles", "graph_breaks", "torch_compile_calls")},
      "trace", trace, "steps", (rep.get("steps") or {}).get("count"),
      "findings", [f["rule"] for f in rep.get("findings") or []], "generation", rep.get("generation"))
PY
done
