#!/usr/bin/env bash
# All-reduce benchmark: hetflow's ring (job allreduce_bench, ring_member
# actors in `hetflow node` processes on this host) against OpenMPI's
# MPI_Allreduce (mpi_allreduce.cpp) and PyTorch's gloo backend
# (gloo_allreduce.py: torch.distributed all_reduce), measured in the same
# run, f32 sum.
#
#   bench/allreduce/run.sh [BUILD_DIR]        (default: build)
#   REPEATS=3      rounds; each round runs every configuration once
#   PROCS="2 4"    process counts
#   SIZES="1048576 16777216 67108864"   bytes (1, 16 and 64 MiB)
#   ITERATIONS=20 WARMUP=3   per size, in each run (hetflow, MPI and gloo alike)
#   QUIET_MAX=300  seconds to wait for a quiet machine before each measurement
#
# Configurations: hetflow over UCX shared memory (ucx_tls sm,self, error mode
# none) and UCX TCP (tcp,self); OpenMPI with its shared-memory BTL (vader)
# and with TCP only (--mca btl tcp,self); gloo over TCP on loopback
# (GLOO_SOCKET_IFNAME=lo, one thread per process; gloo has no shared-memory
# transport on CPU, so the shm and tcp rows show the same gloo measurement).
# Every run does one untimed first all-reduce (gloo_allreduce.py checks its
# result against the expected sum), WARMUP untimed, then ITERATIONS timed one
# by one, and reports the median per-iteration time (rank 0's for MPI and
# gloo); a cell is the median of the REPEATS runs [min-max].
# Bus bandwidth = 2 (N-1)/N * bytes / time (NCCL-tests). The ratio columns are
# the peer's time over hetflow's (> 1: hetflow is faster).
# Needs: deploy/setup.sh --bench (libopenmpi-dev, openmpi-bin, python3-torch
# for Debian's /usr/bin/python3), a built tree.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$src/build}
hetflow=$build/bin/hetflow
work=$(mktemp -d /tmp/hetflow-allreduce-XXXXXX)
trap 'rm -rf "$work"' EXIT
procs=(${PROCS:-2 4})
sizes=(${SIZES:-1048576 16777216 67108864})
iters=${ITERATIONS:-20}
warmup=${WARMUP:-3}
command -v mpicxx >/dev/null || { echo "mpicxx missing: run deploy/setup.sh --bench" >&2; exit 2; }
/usr/bin/python3 -c "import torch.distributed as d; assert d.is_gloo_available()" 2>/dev/null ||
  { echo "/usr/bin/python3 cannot import torch (with gloo): run deploy/setup.sh --bench" >&2; exit 2; }
mpicxx -O2 -o "$work/mpi_allreduce" "$src/bench/allreduce/mpi_allreduce.cpp"

source "$src/bench/lib.sh"  # wait_quiet

topo() {  # topo FILE PORT NPROCS TLS ERROR_MODE
  {
    echo '[cluster]'
    echo "name = \"allreduce-$(basename "$1" .toml)\""
    echo 'data_plane = "ucx"'
    echo "ucx_tls = \"$4\""
    echo "ucx_error_mode = \"$5\""
    local i
    for ((i = 0; i < $3; i++)); do
      printf '[[nodes]]\nname = "p%d"\nhost = "127.0.0.1"\nport = %d\n' "$i" $(($2 + i))
    done
    echo '[job]'
    echo 'kind = "allreduce_bench"'
    local s list=""
    for s in "${sizes[@]}"; do list+="${list:+, }$s"; done
    echo "sizes = [$list]"
    echo "iterations = $iters"
    echo "warmup = $warmup"
  } >"$1"
}

declare -A t_us
run_ours() {  # run_ours LABEL NPROCS PORT TLS ERROR_MODE
  local f="$work/$1-$2.toml"
  topo "$f" "$3" "$2" "$4" "$5"
  wait_quiet
  "$hetflow" run "$f" --report "$f.json" >"$f.log" 2>&1 ||
    { cat "$f.log"; echo "hetflow run failed for $1 ($2 procs)" >&2; exit 1; }
  while read -r bytes us; do t_us[$1,$2,$bytes]+="$us "; done < <(/usr/bin/python3 -c "
import json; d=json.load(open('$f.json'))
assert d['members_identical'], 'members differ'
for r in d['result']['results']: print(r['bytes'], '%.1f' % r['time_us'])")
}

run_mpi() {  # run_mpi LABEL NPROCS [MCA args...]
  local label=$1 np=$2
  shift 2
  wait_quiet
  mpirun --allow-run-as-root --oversubscribe -np "$np" "$@" "$work/mpi_allreduce" "$iters" "$warmup" "${sizes[@]}" \
    >"$work/$label-$np.out" 2>&1 || { cat "$work/$label-$np.out"; exit 1; }
  while read -r bytes us _; do t_us[$label,$np,$bytes]+="$us "; done < <(grep -E '^[0-9]+ ' "$work/$label-$np.out")
}

run_gloo() {  # run_gloo LABEL NPROCS
  local label=$1 np=$2
  wait_quiet
  /usr/bin/python3 "$src/bench/allreduce/gloo_allreduce.py" "$np" "$iters" "$warmup" "${sizes[@]}" \
    >"$work/$label-$np.out" 2>&1 || { cat "$work/$label-$np.out"; echo "gloo run failed ($np procs)" >&2; exit 1; }
  while read -r bytes us _; do t_us[$label,$np,$bytes]+="$us "; done < <(grep -E '^[0-9]+ ' "$work/$label-$np.out")
}

for round in $(seq 1 "${REPEATS:-3}"); do
  for np in "${procs[@]}"; do
    echo "round $round, $np processes..." >&2
    run_ours hetflow-shm "$np" 7870 "sm,self" none
    run_mpi mpi-shm "$np"
    run_ours hetflow-tcp "$np" 7880 "tcp,self" peer
    run_mpi mpi-tcp "$np" --mca btl tcp,self
    run_gloo gloo-tcp "$np"
  done
done

stats() {  # median [min-max] of a list of numbers
  /usr/bin/python3 -c "
import sys, statistics; v=[float(x) for x in sys.argv[1:]]
print('%.0f [%.0f-%.0f]' % (statistics.median(v), min(v), max(v)))" $1
}
med() { /usr/bin/python3 -c "import sys, statistics; print(statistics.median(float(x) for x in sys.argv[1:]))" $1; }

echo
echo "All-reduce, f32 sum, $(nproc) cores, $(date -u +%Y-%m-%d), REPEATS=${REPEATS:-3}, $iters iterations + $warmup warmup per run"
echo "gloo: torch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)'), TCP over loopback (the same measurement in the shm and tcp rows)"
[[ $noisy == 1 ]] && echo "(the machine was not quiet for some measurements)"
echo
echo "| procs | size | path | hetflow ring: time us | MPI_Allreduce: time us | gloo (tcp loopback): time us | hetflow busbw GB/s | MPI busbw GB/s | gloo busbw GB/s | hetflow / MPI | hetflow / gloo |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for np in "${procs[@]}"; do
  for s in "${sizes[@]}"; do
    for path in shm tcp; do
      ours=${t_us[hetflow-$path,$np,$s]:-} theirs=${t_us[mpi-$path,$np,$s]:-}
      [[ -z $ours || -z $theirs ]] && continue
      mo=$(med "$ours") mt=$(med "$theirs")
      bo=$(awk "BEGIN{printf \"%.3f\", 2*($np-1)/$np*$s/($mo*1e3)}")
      bt=$(awk "BEGIN{printf \"%.3f\", 2*($np-1)/$np*$s/($mt*1e3)}")
      gloo=${t_us[gloo-tcp,$np,$s]:-} gt="-" bg="-" rg="-"
      if [[ -n $gloo ]]; then
        mg=$(med "$gloo") gt=$(stats "$gloo")
        bg=$(awk "BEGIN{printf \"%.3f\", 2*($np-1)/$np*$s/($mg*1e3)}")
        rg=$(awk "BEGIN{printf \"%.2fx\", $mg/$mo}")
      fi
      echo "| $np | $((s >> 20)) MiB | $path | $(stats "$ours") | $(stats "$theirs") | $gt | $bo | $bt | $bg | $(awk "BEGIN{printf \"%.2fx\", $mt/$mo}") | $rg |"
    done
  done
done
