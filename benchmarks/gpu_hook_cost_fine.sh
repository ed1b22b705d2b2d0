#!/usr/bin/env bash
# On the GPU: the hook's cost step by step (benchmarks/hook_cost_fine.py),
# with the raw step times kept (gzipped) for pooling runs of one machine.
# $1: a folder of wheels to install first (the GPU machine has no msgspec);
# $2: the loop: host (host-bound training), train-ro (training under
# reduce-overhead, the GPU pacing) or infer (a compiled forward the GPU
# paces); $3: seconds (default 440); $4: a name for the results (default $2).
# SIZE=N in the environment pins the model's size (else sized to ~1 ms), so
# runs of one machine compare like with like.
. "$(dirname "$0")/_gpu_env.sh" "${1:-}"
part="${2:-host}" seconds="${3:-440}" name="${4:-${2:-host}}"
case "$part" in
  host) args=(--loop host --task train --path-share 0.6) ;;
  train-ro) args=(--loop gpu --task train --mode reduce-overhead --size 4096 --path-share 0.5) ;;
  infer) args=(--loop gpu --task infer --size 10240 --path-share 0.5) ;;
  *) echo "unknown loop: $part" >&2; exit 2 ;;
esac
[ -n "${SIZE:-}" ] && args+=(--size "$SIZE")
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
raw=$(mktemp -d)
timeout $((seconds + 130)) python3 benchmarks/hook_cost_fine.py --device cuda --seconds "$seconds" --parts path \
  "${args[@]}" --out "$raw" > "$OUT/$name.txt" 2> "$OUT/$name.err"
echo "== $name rc=$?"
grep -v '^ \|^{\|^}' "$OUT/$name.txt" | grep -v '^rare' | tail -7
python3 -c "
import json, sys
r = json.loads(sys.argv[1].split('rare costs (benchmarks/rare_costs.py): ')[1].split('\n')[0])
for k, v in r.items():
    print(k, {a: b for a, b in v.items() if not a.startswith('gen1') and not a.startswith('gen2')} if isinstance(v, dict) else v)
" "$(cat "$OUT/$name.txt")" 2>&1 | tail -4
gzip -c "$raw"/*steps.json > "$OUT/$name-steps.json.gz"
grep -v USDT "$OUT/$name.err" | tail -3
