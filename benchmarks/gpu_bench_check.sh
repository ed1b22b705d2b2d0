#!/usr/bin/env bash
# ctmon bench on the GPU: two demos and a Hugging Face GPT-2, each mode run to
# a fixed number of steps; the tables land in $OUT (JSON). A cold Inductor
# compile of these takes 20-50 s on the H100: give each mode 150 s (the
# benches together take longer than one 10-minute device call: run them apart).
# $1: a folder of wheels to install first (the GPU machine has no msgspec).
. "$(dirname "$0")/_gpu_env.sh" "${1:-}"
bench() {  # name timeout bench-args...
  local name=$1 limit=$2; shift 2
  start=$(date +%s)
  timeout "$limit" python3 -m ctmon bench --json -o "/tmp/bench-$name" "$@" > "$OUT/bench_$name.json" 2> "$OUT/bench_$name.err"
  echo "== $name rc=$? in $(( $(date +%s) - start )) s"
  python3 -c "
import json, sys
sys.path.insert(0, '.')
from ctmon.report.bench import render_text
print(render_text(json.load(open('$OUT/bench_$name.json'))))" 2>&1 | head -20
}
bench baseline 500 --modes eager,default,reduce-overhead --steps 60 --time-limit 150 demos/gpt_baseline.py --device cuda --steps 100000
bench breaks 500 --modes eager,default,reduce-overhead --steps 60 --time-limit 150 demos/graph_breaks.py --device cuda --steps 100000
bench gpt2 500 --modes eager,default,reduce-overhead --steps 60 --time-limit 150 benchmarks/bench_gpt2_train.py
