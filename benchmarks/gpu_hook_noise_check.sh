#!/usr/bin/env bash
# On the GPU: where the round-to-round noise of benchmarks/hook_cost.py comes
# from -- the host loop without ctmon, under ctmon, and under ctmon with the
# job's thread alone on a core -- then the report's system section beside
# nvidia-smi (benchmarks/gpu_system_check.py). Results in $OUT.
# $1: a folder of wheels to install first; $2: blocks (default 60).
. "$(dirname "$0")/_gpu_env.sh" "${1:-}"
blocks="${2:-60}"
for variant in plain ctmon pinned; do
  case "$variant" in
    plain) extra=(--plain) ;; ctmon) extra=(--arms off,all) ;; pinned) extra=(--arms off,all --pin) ;;
  esac
  timeout 200 python3 benchmarks/hook_cost.py --device cuda --loop host --round-ms 150 --blocks "$blocks" \
    --out "$OUT/$variant" "${extra[@]}" > "$OUT/$variant.txt" 2> "$OUT/$variant.err"
  echo "== $variant rc=$?"; tail -2 "$OUT/$variant.txt"; grep -o '"round_spread_pct": [0-9.]*' "$OUT/$variant.txt"
done
timeout 200 python3 benchmarks/gpu_system_check.py --phase-s 15 --out "$OUT/system" > "$OUT/system.json" 2> "$OUT/system.err"
echo "== system rc=$?"; cat "$OUT/system.json"; tail -3 "$OUT/system.err"
