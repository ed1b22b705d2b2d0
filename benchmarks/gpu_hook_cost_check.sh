#!/usr/bin/env bash
# On the GPU: what ctmon's hook costs a ~1 ms compiled step, resolved
# (benchmarks/hook_cost.py). Parts:
#   host      the host-bound training loop;
#   gpu       the wide training loop, sized to the step time;
#   infer     a GPU-bound compiled forward (the compiled call is the clock);
#   train-ro  a GPU-bound training step under mode="reduce-overhead" (CUDA
#             graphs take the launch cost off a slow host);
#   ranks     the host-bound loop on two torchrun ranks sharing the GPU.
# Results in $OUT. $1: a folder of wheels to install first (the GPU machine
# has no msgspec); $2: the part; $3: blocks (default 200).
. "$(dirname "$0")/_gpu_env.sh" "${1:-}"
part="${2:-host}" blocks="${3:-200}"
case "$part" in
  ranks) args=(--loop host --ranks 2 --arms off,steps,all) ;;
  infer) args=(--loop gpu --task infer --size 10240 --arms off,hooks,all) ;;
  train-ro) args=(--loop gpu --task train --mode reduce-overhead --size 4096 --arms "${ARMS:-off,hooks,all}") ;;
  *) args=(--loop "$part") ;;
esac
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv,noheader
timeout 560 python3 benchmarks/hook_cost.py --device cuda --step-ms 1 --round-ms 150 --blocks "$blocks" "${args[@]}" \
  > "$OUT/hook_cost_$part.txt" 2> "$OUT/hook_cost_$part.err"
echo "== hook cost ($part) rc=$?"
grep -v '^ \|^{\|^}' "$OUT/hook_cost_$part.txt" | tail -8
python3 -c "
import json, sys
d = json.loads(open(sys.argv[1]).read().split('\n|')[0])
for r in d['results']:
    print({k: r.get(k) for k in ('loop', 'task', 'mode', 'size', 'step_ms_off', 'round_spread_pct', 'issue_share', 'blocks', 'graphs_timed')})
" "$OUT/hook_cost_$part.txt" 2>&1 | tail -3
grep -v USDT "$OUT/hook_cost_$part.err" | tail -5
