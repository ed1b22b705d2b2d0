#!/usr/bin/env bash
# On the GPU: what ctmon's hook costs a ~1 ms compiled step, resolved
# (benchmarks/hook_cost.py): the host-bound loop, the GPU-bound loop, or the
# host-bound loop on two torchrun ranks sharing the GPU. Results in $OUT.
# $1: a folder of wheels to install first (the GPU machine has no msgspec);
# $2: host | gpu | ranks; $3: blocks (default 200).
. "$(dirname "$0")/_gpu_env.sh" "${1:-}"
part="${2:-host}" blocks="${3:-200}"
case "$part" in
  ranks) args=(--loop host --ranks 2 --arms off,steps,all) ;;
  *) args=(--loop "$part") ;;
esac
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv,noheader
timeout 560 python3 benchmarks/hook_cost.py --device cuda --step-ms 1 --round-ms 150 --blocks "$blocks" "${args[@]}" \
  > "$OUT/hook_cost_$part.txt" 2> "$OUT/hook_cost_$part.err"
echo "== hook cost ($part) rc=$?"
cat "$OUT/hook_cost_$part.txt"; grep -v USDT "$OUT/hook_cost_$part.err" | tail -5
