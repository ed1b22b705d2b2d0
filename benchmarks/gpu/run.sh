#!/usr/bin/env bash
# The GPU runner: every benchmark and check that needs a CUDA machine, by name,
# from the repository's root on that machine (CI has no GPU).
#
#   bash benchmarks/gpu/run.sh CHECK [ARGS...]
#
# Environment:
#   WHEELS  a folder of wheels installed first (into /tmp/ctmon-site): the GPU
#           machine has torch but not ctmon's own dependencies (msgspec,
#           textual, ...). Default: .whl when it exists.
#   OUT     where results land (default ./gpu-results): one file or folder per
#           check, named after it; the tables are printed too.
#
# Checks (docs/PERFORMANCE.md gives the figures each produced; benchmarks/README.md
# what each answers):
#   check WHAT           gpu/check.py WHAT: timing (device-true step times), events
#                        (autotuning, cudagraphs), trace-names, costs (CUDA calls, NVML), all
#   panel                the GPU panel beside nvidia-smi, the GPU kept busy
#   system               the report's system section beside nvidia-smi
#   modes [ARGS]         torch.compile modes measured by ctmon (gpu/modes.py ARGS)
#   rounds PART [BLOCKS] hook_cost.py rounds; PART: host, gpu, both, infer (a compiled
#                        forward the GPU paces), train-ro (training under reduce-overhead),
#                        ranks (two ranks sharing the GPU); ARMS=... for train-ro
#   fine LOOP [SECONDS] [NAME]
#                        hook_cost.py fine; LOOP: host, train-ro, infer; raw step times
#                        kept gzipped for pooling runs of one machine; SIZE=N pins the size
#   noise [BLOCKS]       the machine's own round-to-round noise: hook_cost.py rounds on the
#                        host loop with no ctmon, under ctmon, and with the job's thread pinned
#   shares [ARGS]        region shares beside torch.profiler (region_shares.py profiler)
#   phases               PyTorch's phase timers read live beside the same run's TORCH_TRACE
#   compile [REPS]       compile-time cost of demo 1: no hook, ctmon, TORCH_TRACE
#   e2e-ranks            whole torchrun jobs (2 ranks sharing the GPU), plain vs under ctmon
#   bench NAME           ctmon bench: baseline (demos/gpt_baseline.py), breaks
#                        (demos/graph_breaks.py) or gpt2 (jobs/gpt2_train.py)
#   library [JOB...]     library models under ctmon beside their TORCH_TRACE
#                        (jobs/library_models.py; all jobs by default)
#   ranks                two torchrun ranks sharing one GPU (gloo), one recompiling
#   nccl                 two GPUs: compiled DDP over NCCL, a rank recompiling alone until
#                        NCCL's watchdog aborts the job, the hook per rank
#   trace                PyTorch's trace of a CPU and a CUDA run, read by ctmon
#   cudagraphs [ARGS]    reduce-overhead with shape changes (gpu/cudagraph_check.py)
#   py SCRIPT [ARGS]     any other benchmark with this environment, e.g.
#                        py benchmarks/viewer.py ingest
set -u
usage() { sed -n '2,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
checks="check panel system modes rounds fine noise shares phases compile e2e-ranks bench library ranks nccl trace cudagraphs py"
check=${1:-}; shift || true
if [ -z "$check" ] || [ "$check" = -h ] || [ "$check" = --help ]; then usage; exit 0; fi
case " $checks " in *" $check "*) ;; *) usage >&2; echo "unknown check: $check" >&2; exit 2 ;; esac

cd "$(dirname "$0")/../.."
OUT="${OUT:-./gpu-results}"
mkdir -p "$OUT"
WHEELS="${WHEELS:-$( [ -d .whl ] && echo .whl )}"
if [ -n "$WHEELS" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/ctmon-site \
    "$WHEELS"/*.whl && export PYTHONPATH=/tmp/ctmon-site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
py=python3
b=benchmarks

gpu_line() { nvidia-smi --query-gpu=index,name,clocks.sm,clocks.max.sm,memory.total --format=csv,noheader; }

# name limit command...: the command's output in $OUT/name.txt (stderr: .err), its exit status printed
save() {
  local name=$1 limit=$2; shift 2
  local start; start=$(date +%s)
  timeout "$limit" "$@" > "$OUT/$name.txt" 2> "$OUT/$name.err"
  echo "== $name rc=$? in $(( $(date +%s) - start )) s"
}

case "$check" in
  check)
    save "check_${1:-all}" 560 $py $b/gpu/check.py "${1:-all}" --out "$OUT/check"; cat "$OUT/check_${1:-all}.txt" ;;
  panel)
    save panel 60 $py $b/gpu/panel_check.py --burn --rounds 3 --util-tol 5 --mem-tol-mib 20; head -c 3000 "$OUT/panel.txt" ;;
  system)
    save system 200 $py $b/gpu/system_check.py --phase-s 15 --out "$OUT/system"; cat "$OUT/system.txt" ;;
  modes)
    save modes 590 $py $b/gpu/modes.py --out "$OUT/modes" "$@"; grep "^|" "$OUT/modes.txt" ;;
  rounds)
    part=${1:-host} blocks=${2:-200}
    case "$part" in
      ranks) args=(--loop host --ranks 2 --arms off,steps,all) ;;
      infer) args=(--loop gpu --task infer --size 10240 --arms off,hooks,all) ;;
      train-ro) args=(--loop gpu --task train --mode reduce-overhead --size 4096 --arms "${ARMS:-off,hooks,all}") ;;
      *) args=(--loop "$part") ;;
    esac
    gpu_line
    save "rounds_$part" 560 $py $b/hook_cost.py rounds --device cuda --step-ms 1 --round-ms 150 --blocks "$blocks" \
      "${args[@]}" --out "$OUT/rounds_$part"
    grep "^|" "$OUT/rounds_$part.txt"; grep -o '"round_spread_pct": [0-9.]*\|"issue_share": [0-9.]*' "$OUT/rounds_$part.txt" ;;
  fine)
    loop=${1:-host} seconds=${2:-440} name=${3:-${1:-host}}
    case "$loop" in
      host) args=(--loop host --task train --path-share 0.6) ;;
      train-ro) args=(--loop gpu --task train --mode reduce-overhead --size 4096 --path-share 0.5) ;;
      infer) args=(--loop gpu --task infer --size 10240 --path-share 0.5) ;;
      *) echo "unknown loop: $loop" >&2; exit 2 ;;
    esac
    [ -n "${SIZE:-}" ] && args+=(--size "$SIZE")
    gpu_line
    raw=$(mktemp -d)
    save "$name" $((seconds + 130)) $py $b/hook_cost.py fine --device cuda --seconds "$seconds" --parts path \
      "${args[@]}" --out "$raw"
    grep "^|\|^rare" "$OUT/$name.txt"
    gzip -c "$raw"/*steps.json > "$OUT/$name-steps.json.gz" ;;
  noise)
    for variant in plain ctmon pinned; do
      case "$variant" in
        plain) extra=(--plain) ;; ctmon) extra=(--arms off,all) ;; pinned) extra=(--arms off,all --pin) ;;
      esac
      save "noise_$variant" 200 $py $b/hook_cost.py rounds --device cuda --loop host --round-ms 150 \
        --blocks "${1:-60}" --out "$OUT/noise_$variant" "${extra[@]}"
      grep "^|" "$OUT/noise_$variant.txt"; grep -o '"round_spread_pct": [0-9.]*' "$OUT/noise_$variant.txt"
    done ;;
  shares)
    [ $# -gt 0 ] || set -- --steps 5000 --width 2048 --batch 1024 --glue 30
    save shares 300 $py $b/region_shares.py profiler --device cuda "$@"; cat "$OUT/shares.txt" ;;
  phases)
    rm -rf /tmp/tt-at
    TORCHINDUCTOR_CACHE_DIR=/tmp/ind-at TORCH_TRACE=/tmp/tt-at save phases_run 240 \
      $py -m ctmon record -q -o /tmp/at.jsonl $b/jobs/autotune_mlp.py
    $py $b/gpu/readback.py phases /tmp/at.jsonl /tmp/tt-at | tee "$OUT/phases.txt" ;;
  compile)
    save compile 590 $py $b/whole_job.py compile --device cuda --demo --reps "${1:-2}"; cat "$OUT/compile.txt" ;;
  e2e-ranks)
    save e2e_ranks 560 $py $b/whole_job.py e2e --device cuda --ranks 2 --pairs 6 --steps 2000 --width 512
    cat "$OUT/e2e_ranks.txt" ;;
  bench)
    name=${1:-baseline}
    case "$name" in
      baseline) target=(demos/gpt_baseline.py --device cuda --steps 100000) ;;
      breaks) target=(demos/graph_breaks.py --device cuda --steps 100000) ;;
      gpt2) target=($b/jobs/gpt2_train.py) ;;
      *) echo "unknown bench: $name" >&2; exit 2 ;;
    esac
    save "bench_$name" 500 $py -m ctmon bench --json -o "/tmp/bench-$name" --modes eager,default,reduce-overhead \
      --steps 60 --time-limit 150 "${target[@]}"
    $py $b/gpu/readback.py bench "$OUT/bench_$name.txt" ;;
  library)
    [ $# -gt 0 ] || set -- gpt2-train llama-generate llama-generate-fixed llama-generate-dynamic generate-uncompiled
    for job in "$@"; do
      rm -rf "/tmp/tt-$job" "/tmp/rec-$job.jsonl"
      TORCH_TRACE="/tmp/tt-$job" save "library_$job" 200 $py -m ctmon record -o "/tmp/rec-$job.jsonl" \
        $b/jobs/library_models.py "$job"
      $py $b/gpu/readback.py library "$job" "/tmp/rec-$job.jsonl" "/tmp/tt-$job" "$OUT/library_$job.err" \
        "$OUT/library_$job.json"
    done ;;
  ranks)
    rm -rf /tmp/tt-ranks /tmp/rec-ranks.jsonl
    TORCH_TRACE=/tmp/tt-ranks save ranks_run 400 $py -m ctmon record -o /tmp/rec-ranks.jsonl \
      -m torch.distributed.run --nproc_per_node 2 --master_addr 127.0.0.1 --master_port 29533 \
      $b/jobs/ddp_gloo_one_gpu.py --diverge
    tail -5 "$OUT/ranks_run.err"
    cp /tmp/rec-ranks.jsonl "$OUT/ranks.jsonl"
    $py $b/gpu/readback.py ranks /tmp/rec-ranks.jsonl /tmp/tt-ranks --json "$OUT/ranks.json" ;;
  nccl)
    # NVLink multicast stays off, in every process the launcher starts too.
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
    gpu_line
    launch=(-m torch.distributed.run --nproc_per_node 2 --master_addr 127.0.0.1)
    # 1. a clean run with TORCH_TRACE: each rank's counts beside its trace file
    rm -rf /tmp/tt-nccl /tmp/nccl.jsonl
    TORCHINDUCTOR_CACHE_DIR=/tmp/ind-1 TORCH_TRACE=/tmp/tt-nccl save nccl_clean 150 \
      $py -m ctmon record -q -o /tmp/nccl.jsonl "${launch[@]}" --master_port 29611 $b/jobs/ddp_nccl.py --steps 200
    $py $b/gpu/readback.py ranks /tmp/nccl.jsonl /tmp/tt-nccl --json "$OUT/nccl_report.json"
    cp /tmp/nccl.jsonl "$OUT/nccl.jsonl"
    # 2. rank 1 recompiles alone (autotuning GEMMs) past a 10 s collective timeout:
    # what the store says, second by second, until NCCL's watchdog aborts the job
    rm -f /tmp/hang.jsonl
    $py $b/gpu/readback.py follow /tmp/hang.jsonl --for 280 > "$OUT/nccl_follow.txt" 2>&1 &
    follower=$!
    TORCH_NCCL_ASYNC_ERROR_HANDLING=1 TORCHINDUCTOR_CACHE_DIR=/tmp/ind-2 save nccl_hang 280 \
      $py -m ctmon record -q -o /tmp/hang.jsonl "${launch[@]}" --master_port 29612 $b/jobs/ddp_nccl.py --steps 40 \
      --diverge-at 10 --timeout 10 --slow-recompile
    wait "$follower"
    cat "$OUT/nccl_follow.txt"
    grep -E "step 10|Watchdog caught|exitcode|SIGABRT|Signal 6" "$OUT/nccl_hang.err" | cut -c1-240 | head -12
    cp /tmp/hang.jsonl "$OUT/nccl_hang.jsonl"
    $py -m ctmon report /tmp/hang.jsonl > "$OUT/nccl_hang_report.txt" 2>&1; echo "report rc=$?"
    head -40 "$OUT/nccl_hang_report.txt"
    # 3. the hook's cost per rank
    save nccl_rounds 300 $py $b/hook_cost.py rounds --device cuda --ranks 2 --loop host --arms off,steps,all --blocks 60
    grep "^|" "$OUT/nccl_rounds.txt" ;;
  trace)
    rm -rf /tmp/tt-gpu
    TORCH_TRACE=/tmp/tt-gpu timeout 300 $py tests/workloads/graph_breaks.py > /dev/null 2>&1  # aot_eager, on the CPU
    TORCH_TRACE=/tmp/tt-gpu timeout 300 $py $b/jobs/mlp_shapes.py
    mkdir -p "$OUT/trace"
    $py $b/gpu/readback.py trace /tmp/tt-gpu "$OUT/trace" | tee "$OUT/trace.txt" ;;
  cudagraphs)
    save cudagraphs 560 $py $b/gpu/cudagraph_check.py --out "$OUT/cudagraphs" "$@"; cat "$OUT/cudagraphs.txt" ;;
  py)
    "$py" "$@" ;;
esac
