#!/usr/bin/env bash
# The multi-GPU suite and benchmark in one command, on a host with several GPUs.
#
#   ../shared/tools/gpu-bundle.sh --bench          # here: build and pack (no GPU needed)
#   bash benches/scripts/multi-gpu.sh               # there: every visible GPU
#   GPUS=0,1 bash benches/scripts/multi-gpu.sh      # or some of them
#   bash benches/scripts/multi-gpu.sh tests scaling  # only these parts (tests, all-to-all,
#                                                     # scaling, two-level, variants, pipeline,
#                                                     # compress, processes)
#   COUNTS="2 4" bash benches/scripts/multi-gpu.sh two-level   # only these rank counts
#   COMM=peer bash benches/scripts/multi-gpu.sh scaling  # one-process runs over the copy
#                                                     # engines instead of NCCL
#
# 1. Every test executable of the bundle with JOINKIT_REQUIRE_GPU=1 (.gpu-bundle/run.sh).
# 2. all-to-all: the raw all-to-all's bandwidth at 1 MiB … 2 GiB a rank (a tiny join each).
# 3. scaling: joinkit-bench distributed over NCCL, one process driving every GPU (--gpus), the
#    raw all-to-all measured in every run: weak scaling at Gao's shape (2^27 ⋈ 2^28 8 B keys with
#    8 B row ids a rank) and strong scaling of 2^27 ⋈ 2^28 over 1, 2, 4, ... GPUs.
# 4. two-level: one- against two-level shuffle (2 GPUs as 2 nodes of 1, 4 as 2 × 2).
# 5. variants: replicated against partitioned build sides; Zipf 1.0 and one key holding 10 % of
#    S, heavy keys handled and not; Wu's 4 B 2+2 wide shape; TPC-H orders ⋈ lineitem at SF 10.
# 6. pipeline: the pipelined shuffle against the blocking one (1, 2, 4, 8 chunks) at Gao's shape,
#    partitioned, plus one 4-chunk run drawing its timeline (pipeline-K.svg/.png).
# 7. compress: compressed against uncompressed shuffles (off, on, auto) on TPC-H orders ⋈
#    lineitem (SF 10) and on random keys, over NVLink and over NCCL's socket transport
#    (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1, a stand-in for a slow network); every run measures
#    the raw all-to-all on the same transport (a2a GB/s).
# 8. processes: the weak-scaling run with one process per GPU, started by a shell loop the way
#    torchrun or srun would (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NCCL_COMM_ID).
#
# JSON lines, plots and logs go to $OUT (or ./multi-gpu-logs); exits non-zero if anything failed.
# JOINKIT_BENCH names a joinkit-bench binary to use instead of the bundle's.
set -uo pipefail
logs=${OUT:-$PWD/multi-gpu-logs}
mkdir -p "$logs"
# NVLink SHARP (multicast) stays off: see the device notes on the lent machines.
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
# The communicator of the one-process runs: nccl, or peer (copy engines, joinkit_comm::peer);
# the compressed shuffles stay on NCCL (their socket transport is NCCL's).
comm=${COMM:-nccl}
gpus=${GPUS:-$(nvidia-smi --query-gpu=index --format=csv,noheader | paste -sd, -)}
IFS=, read -r -a gpu_list <<<"$gpus"
n=${#gpu_list[@]}
echo "GPUs: $gpus ($n)"
status=0

parts=${*:-tests all-to-all scaling two-level variants pipeline compress processes}
want() { [[ " $parts " == *" $1 "* ]]; }

if want tests; then
  OUT=$logs bash "$(dirname "$0")/../../.gpu-bundle/run.sh" || status=1
fi
bundle_bin=$(cat "$logs/.bundle-dir" 2>/dev/null)/bin
if [[ -z ${JOINKIT_BENCH:-} && ! -x $bundle_bin/bin--joinkit-bench ]]; then
  bundle_bin=$(mktemp -d)/bin
  tar -xJf "$(dirname "$0")/../../.gpu-bundle/bundle.tar.xz" -C "${bundle_bin%/bin}"
fi
bench=${JOINKIT_BENCH:-$bundle_bin/bin--joinkit-bench}
if [[ ! -x $bench ]]; then
  echo "no joinkit-bench binary at $bench (build the bundle with --bench)" >&2
  exit 1
fi

# Rank counts 1, 2, 4, ... up to n (or $COUNTS), each a prefix of the GPU list.
counts=()
if [[ -n ${COUNTS:-} ]]; then
  read -r -a counts <<<"$COUNTS"
else
  for ((k = 1; k <= n; k *= 2)); do counts+=("$k"); done
  ((counts[-1] == n)) || counts+=("$n")
fi
prefix() {
  local IFS=,
  echo "${gpu_list[*]:0:$1}"
}

bench_run() {
  local name=$1
  shift
  echo "== $name: $*"
  "$bench" distributed --repeat 10 --out-dir "$logs" --name "$name" "$@" >"$logs/$name.log" 2>&1 ||
    status=1
  grep -v '^$' "$logs/$name.log" | tail -n 6
}

if want scaling; then
  for k in "${counts[@]}"; do
    g=$(prefix "$k")
    bench_run "weak-gao-$k" --comm "$comm" --gpus "$g" --per-rank --r 2^27 --s 2^28
    bench_run "strong-$k" --comm "$comm" --gpus "$g" --r 2^27 --s 2^28
  done
fi

if want all-to-all; then
  for k in "${counts[@]}"; do
    ((k > 1)) || continue
    bench_run "all-to-all-$k" --comm "$comm" --gpus "$(prefix "$k")" --per-rank --r 2^16 \
      --sweep a2a-bytes=2^20..2^31
  done
fi

if want two-level; then
  for k in "${counts[@]}"; do
    ((k > 1 && k % 2 == 0)) || continue
    bench_run "two-level-$k" --comm "$comm" --gpus "$(prefix "$k")" --per-rank --r 2^26 --s 2^27 \
      --placement partitioned --ranks-per-node $((k / 2)) --sweep shuffle=one-level,two-level
  done
fi

if want variants; then
  for k in "${counts[@]}"; do
    g=$(prefix "$k")
    ((k > 1)) || continue
    bench_run "placement-$k" --comm "$comm" --gpus "$g" --per-rank --r 2^22 --s 2^27 \
      --sweep placement=replicated,partitioned
    bench_run "zipf-$k" --comm "$comm" --gpus "$g" --per-rank --r 2^26 --s 2^27 --zipf 1.0 \
      --sweep skew-load=0,0.25
    bench_run "heavy-$k" --comm "$comm" --gpus "$g" --per-rank --r 2^26 --s 2^27 --heavy 0.1 \
      --sweep skew-load=0,0.25
    bench_run "wide-4b-$k" --comm "$comm" --gpus "$g" --per-rank --r 2^26 --s 2^27 --key-bits 32 \
      --payloads 2
    bench_run "tpch-$k" --comm "$comm" --gpus "$g" --tpch 10
  done
fi

if want pipeline; then
  for k in "${counts[@]}"; do
    ((k > 1)) || continue
    g=$(prefix "$k")
    bench_run "pipeline-$k" --comm "$comm" --gpus "$g" --per-rank --r 2^27 --s 2^28 \
      --placement partitioned --sweep pipeline-chunks=1,2,4,8
    bench_run "pipeline-timeline-$k" --comm "$comm" --gpus "$g" --per-rank --r 2^27 --s 2^28 \
      --placement partitioned --pipeline-chunks 4 --timeline "$logs/pipeline-$k.svg"
  done
fi

if want compress; then
  for k in "${counts[@]}"; do
    ((k > 1)) || continue
    g=$(prefix "$k")
    for transport in nvlink socket; do
      # Variables before a function call are exported to what it runs.
      p2p=0
      [[ $transport == socket ]] && p2p=1
      NCCL_P2P_DISABLE=$p2p NCCL_SHM_DISABLE=$p2p bench_run "compress-tpch-$transport-$k" \
        --comm nccl --gpus "$g" --tpch 10 --placement partitioned --sweep compress=off,on,auto
      NCCL_P2P_DISABLE=$p2p NCCL_SHM_DISABLE=$p2p bench_run "compress-random-$transport-$k" \
        --comm nccl --gpus "$g" --per-rank --r 2^25 --s 2^26 --placement partitioned \
        --sweep compress=off,on,auto
    done
  done
fi

# One process per GPU, as a launcher starts them.
if want processes; then
  echo "== weak-gao-processes-$n"
  port=$((29500 + RANDOM % 1000))
  pids=()
  for ((r = 0; r < n; r++)); do
    CUDA_VISIBLE_DEVICES=${gpu_list[$r]} RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r \
      LOCAL_WORLD_SIZE=$n NCCL_COMM_ID=127.0.0.1:$port \
      "$bench" distributed --comm nccl --per-rank --r 2^27 --s 2^28 --repeat 10 \
      --out-dir "$logs" --name "weak-gao-processes-$n" >"$logs/weak-gao-processes-$n.rank$r.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || status=1; done
  grep -v '^$' "$logs/weak-gao-processes-$n.rank0.log" | tail -n 6
fi

echo "multi-GPU suite ($parts): $([[ $status == 0 ]] && echo passed || echo FAILED); logs in $logs"
exit $status
