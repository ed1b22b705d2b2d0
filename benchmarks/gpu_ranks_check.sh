#!/usr/bin/env bash
# The per-rank view on a CUDA machine: two torchrun ranks sharing one GPU over
# gloo (benchmarks/gpu_ranks_job.py) under `ctmon record`, with TORCH_TRACE;
# prints each rank's figures from `ctmon report --json` beside an independent
# count over that rank's own trace file, and keeps both in $OUT.
# $1: a folder of wheels to install first (the GPU machine has no msgspec).
. "$(dirname "$0")/_gpu_env.sh" "${1:-}"
rm -rf /tmp/tt-ranks /tmp/rec-ranks.jsonl
start=$(date +%s)
TORCH_TRACE=/tmp/tt-ranks timeout 400 python3 -m ctmon record -o /tmp/rec-ranks.jsonl \
  -m torch.distributed.run --nproc_per_node 2 --master_addr 127.0.0.1 --master_port 29533 benchmarks/gpu_ranks_job.py --diverge \
  > /tmp/out-ranks.txt 2>&1
echo "ranks rc=$? $(( $(date +%s) - start )) s"
tail -5 /tmp/out-ranks.txt
cp /tmp/rec-ranks.jsonl "$OUT/ranks.jsonl"
python3 benchmarks/ranks_vs_trace.py /tmp/rec-ranks.jsonl /tmp/tt-ranks --json "$OUT/ranks.json"
