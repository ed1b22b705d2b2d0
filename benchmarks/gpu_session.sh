#!/usr/bin/env bash
# Every GPU-only measurement in one go (the GPU machine has no textual: its
# wheels can be installed from a folder given as $1). Results land in $OUT
# (default: ./gpu-results): one JSON file per check.
set -u
OUT="${OUT:-./gpu-results}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if [ -n "${1:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/ctmon-site "$1"/*.whl \
    && export PYTHONPATH=/tmp/ctmon-site
fi
run() {  # name timeout command...
  local name=$1 limit=$2; shift 2
  timeout "$limit" "$@" > "$OUT/$name.json" 2> "$OUT/$name.err"
  echo "$name rc=$?"
}
run train1 120 python3 benchmarks/hook_overhead.py train --device cuda --step-ms 1 --pairs 9
mkdir -p "$OUT/e"
run events 110 python3 benchmarks/gpu_check.py events --out "$OUT/e"
cp "$OUT/e/modes_reduce-overhead.jsonl" "$OUT/ro_skip.jsonl" 2>/dev/null; rm -rf "$OUT/e"
run panel 45 python3 benchmarks/gpu_panel_check.py --burn --rounds 5 --util-tol 5
run ingest 130 python3 benchmarks/viewer.py ingest --events 200000
run idle 60 python3 benchmarks/viewer.py idle --seconds 20
run compile 200 python3 benchmarks/hook_overhead.py compile --device cuda --demo --reps 2
for f in "$OUT"/*.json; do echo "== $f"; head -c 1500 "$f"; echo; done
