#!/usr/bin/env bash
# The hook's cost per rank on a CUDA machine (benchmarks/hook_overhead_ranks.py:
# two torchrun ranks sharing the GPU, then on the CPU), and the ranks no launcher
# names (mp.spawn) and a rank's uncaught exception on this machine's Python.
# $1: a folder of wheels to install first (the GPU machine has no msgspec).
. "$(dirname "$0")/_gpu_env.sh" "${1:-}"
MASTER_PORT=29561 MASTER_ADDR=127.0.0.1 timeout 120 python3 -m ctmon record -q -o /tmp/sp.jsonl tests/workloads/spawn_ranks.py --launch spawn > /tmp/sp.out 2>&1
echo "spawn rc=$?"
python3 -m ctmon report /tmp/sp.jsonl --json | python3 -c "
import json, sys; r = json.load(sys.stdin)
print('spawn ranks', [(k['rank'], k['compile']['compiles'], k['steps']['count']) for k in r['ranks']], 'python', r['python'])"
timeout 120 python3 -m ctmon record -q -o /tmp/f.jsonl -m torch.distributed.run --nproc_per_node 2 --master_addr 127.0.0.1 \
  --master_port 29562 tests/workloads/rank_faults.py --import-error > /tmp/f.out 2>&1
echo "import-error rc=$?"
python3 -m ctmon report /tmp/f.jsonl --json | python3 -c "
import json, sys; r = json.load(sys.stdin); print('finding:', r['findings'][0]['title'])"
timeout 280 python3 benchmarks/hook_overhead_ranks.py --device cuda --ranks 2 --pairs 6 --steps 2000 --width 512 \
  > "$OUT/ranks_cuda.json" 2> "$OUT/ranks_cuda.err"
echo "cuda rc=$?"; python3 -c "import json; [print(r) for r in json.load(open('$OUT/ranks_cuda.json'))['per_rank']]"
timeout 200 python3 benchmarks/hook_overhead_ranks.py --device cpu --ranks 2 --pairs 6 --steps 1500 \
  > "$OUT/ranks_cpu.json" 2> "$OUT/ranks_cpu.err"
echo "cpu rc=$?"; python3 -c "import json; [print(r) for r in json.load(open('$OUT/ranks_cpu.json'))['per_rank']]"
