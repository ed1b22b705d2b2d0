#!/usr/bin/env bash
# On the GPU, in one call: the hook's cost per step (benchmarks/hook_cost.py,
# host-bound and GPU-bound loops, wall and CPU time), then ctmon bench on the
# graph-breaks demo. Results in $OUT.
# $1: a folder of wheels to install first; $2: blocks (default 60).
. "$(dirname "$0")/_gpu_env.sh" "${1:-}"
blocks="${2:-60}"
timeout 230 python3 benchmarks/hook_cost.py --device cuda --loop both --round-ms 150 --blocks "$blocks" \
  --arms off,steps,all --out "$OUT/cost" > "$OUT/hook_cost.txt" 2> "$OUT/hook_cost.err"
echo "== hook cost rc=$?"; grep "^|" "$OUT/hook_cost.txt"; tail -3 "$OUT/hook_cost.err"
rm -f "$OUT"/cost/*.jsonl
start=$(date +%s)
timeout 340 python3 -m ctmon bench --json -o /tmp/bench-breaks --modes eager,default,reduce-overhead --steps 60 \
  --time-limit 150 demos/graph_breaks.py --device cuda --steps 100000 > "$OUT/bench_breaks.json" 2> "$OUT/bench_breaks.err"
echo "== bench breaks rc=$? in $(( $(date +%s) - start )) s"
python3 -c "
import json, sys
sys.path.insert(0, '.')
from ctmon.report.bench import render_text
print(render_text(json.load(open('$OUT/bench_breaks.json'))))" 2>&1 | head -30
