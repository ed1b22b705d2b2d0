#!/usr/bin/env bash
# The per-rank view on a machine with two GPUs: compiled DDP over NCCL, one GPU
# per rank (benchmarks/gpu_nccl_job.py), under `ctmon record -- torchrun`.
#  1. a clean run with TORCH_TRACE: each rank's counts beside its trace file,
#     device-timed steps per rank, GPU samples per device, each rank's memory;
#  2. rank 1 alone recompiles (autotuning GEMMs) while rank 0 waits in the
#     all-reduce, with a 10 s collective timeout: what the store says, second by
#     second (benchmarks/rank_states_follow.py), until NCCL's watchdog aborts the
#     job; then the report of the recording the abort left;
#  3. the hook's cost per rank (benchmarks/hook_cost.py --ranks 2).
# $1: a folder of wheels to install first (the GPU machine has no msgspec).
. "$(dirname "$0")/_gpu_env.sh" "${1:-}"
# NVLink multicast stays off, in every process the launcher starts too.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
launch="-m torch.distributed.run --nproc_per_node 2 --master_addr 127.0.0.1"

rm -rf /tmp/tt-nccl /tmp/nccl.jsonl
start=$(date +%s)
TORCHINDUCTOR_CACHE_DIR=/tmp/ind-1 TORCH_TRACE=/tmp/tt-nccl timeout 150 python3 -m ctmon record -q -o /tmp/nccl.jsonl \
  $launch --master_port 29611 benchmarks/gpu_nccl_job.py --steps 200 > /tmp/nccl.out 2>&1
echo "== clean run rc=$? in $(( $(date +%s) - start )) s"; tail -3 /tmp/nccl.out
python3 benchmarks/ranks_vs_trace.py /tmp/nccl.jsonl /tmp/tt-nccl --json "$OUT/nccl_report.json"
cp /tmp/nccl.jsonl "$OUT/nccl.jsonl"

rm -f /tmp/hang.jsonl
python3 benchmarks/rank_states_follow.py /tmp/hang.jsonl --for 280 > "$OUT/hang_follow.txt" 2>&1 &
follower=$!
start=$(date +%s)
TORCH_NCCL_ASYNC_ERROR_HANDLING=1 TORCHINDUCTOR_CACHE_DIR=/tmp/ind-2 timeout 280 python3 -m ctmon record -q -o /tmp/hang.jsonl \
  $launch --master_port 29612 benchmarks/gpu_nccl_job.py --steps 40 --diverge-at 10 --timeout 10 \
  --slow-recompile > /tmp/hang.out 2>&1
echo "== diverging run rc=$? in $(( $(date +%s) - start )) s"
wait "$follower"
cat "$OUT/hang_follow.txt"
grep -E "step 10|Watchdog caught|exitcode|SIGABRT|Signal 6" /tmp/hang.out | cut -c1-240 | head -12
cp /tmp/hang.jsonl "$OUT/hang.jsonl"; cp /tmp/hang.out "$OUT/hang.out"
python3 -m ctmon report /tmp/hang.jsonl > "$OUT/hang_report.txt" 2>&1; echo "report rc=$?"
head -40 "$OUT/hang_report.txt"

timeout 300 python3 benchmarks/hook_cost.py --device cuda --ranks 2 --loop host --arms off,steps,all --blocks 60 \
  > "$OUT/ranks_cost.txt" 2> "$OUT/ranks_cost.err"
echo "== hook per rank rc=$?"; grep "^|" "$OUT/ranks_cost.txt"
tail -3 "$OUT/ranks_cost.err"
