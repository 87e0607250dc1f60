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
#   MESSAGES=1     also run hetflow's message ring over UCX shared memory
#                  (shm = "off"), the shm path before the segment existed
#   NETNS=1        also measure TCP across 2 network namespaces joined by a
#                  veth pair (bench/allreduce/netns.sh; needs root and iproute2's
#                  ip); the process count is then 2 (PROCS is ignored)
#
# Configurations: hetflow's ring members on one host sum through one
# shared-memory segment (the ring's shm = "auto", the default: the "shm
# (segment)" rows; with MESSAGES=1 also the message ring over UCX shared
# memory, ucx_tls sm,self, error mode none) and over UCX TCP (tcp,self, shm =
# "off": the tcp rows); OpenMPI with its shared-memory BTL (vader)
# and with TCP only (--mca btl tcp,self); gloo over TCP on loopback
# (GLOO_SOCKET_IFNAME=lo, one thread per process; gloo has no shared-memory
# transport on CPU, so the shm and tcp rows show the same gloo measurement).
# NETNS=1 adds rows "tcp veth (2 netns)": namespaces A and B (10.77.0.1/24 and
# 10.77.0.2/24 on the two ends of a veth pair, nothing else connected), one
# process in each. hetflow: `hetflow node` n0 in A and n1 in B (ucx_tls
# tcp,self, error mode peer, as the tcp row). MPI: mpirun runs in A and starts
# rank 0 there and rank 1 through `ip netns exec B`; ob1 with --mca btl
# tcp,self restricted to the veth subnet, and its PMIx server, which listens
# on loopback by default, is told to listen on A's veth address so that rank
# 1 can reach it. gloo: rank 0 in A (MASTER_ADDR = A's address), rank 1 in B,
# GLOO_SOCKET_IFNAME the veth ends. Each of these runs checks the bytes A's
# veth end sent against what the all-reduces must send, and fails if the
# traffic did not cross the veth; the per-run amounts are printed below the table.
# Every run does one untimed first all-reduce (hetflow, mpi_allreduce.cpp and
# gloo_allreduce.py check its result against the expected sum), WARMUP untimed, then ITERATIONS timed one
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
netns=${NETNS:-0}
messages=${MESSAGES:-0}
cleanup() {
  if [[ $netns == 1 ]] && declare -F netns_teardown >/dev/null; then netns_teardown; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
procs=(${PROCS:-2 4})
[[ $netns == 1 ]] && procs=(2)
sizes=(${SIZES:-1048576 16777216 67108864})
iters=${ITERATIONS:-20}
warmup=${WARMUP:-3}
command -v mpicxx >/dev/null || { echo "mpicxx missing: run deploy/setup.sh --bench" >&2; exit 2; }
/usr/bin/python3 -c "import torch.distributed as d; assert d.is_gloo_available()" 2>/dev/null ||
  { echo "/usr/bin/python3 cannot import torch (with gloo): run deploy/setup.sh --bench" >&2; exit 2; }
mpicxx -O2 -o "$work/mpi_allreduce" "$src/bench/allreduce/mpi_allreduce.cpp"

source "$src/bench/lib.sh"  # wait_quiet
if [[ $netns == 1 ]]; then
  source "$src/bench/allreduce/netns.sh"  # netns_setup, $ns_a, $veth_a, $ip_a, ...
  netns_setup || exit 2
fi

job_section() {  # job_section [SHM]: the allreduce_bench [job] table of every hetflow topology here
  echo '[job]'
  echo 'kind = "allreduce_bench"'
  [[ -n ${1:-} ]] && echo "shm = \"$1\""
  local s list=""
  for s in "${sizes[@]}"; do list+="${list:+, }$s"; done
  echo "sizes = [$list]"
  echo "iterations = $iters"
  echo "warmup = $warmup"
}

topo() {  # topo FILE PORT NPROCS TLS ERROR_MODE [SHM]
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
    job_section "${6:-}"
  } >"$1"
}

declare -A t_us
run_ours() {  # run_ours LABEL NPROCS PORT TLS ERROR_MODE [SHM]
  local f="$work/$1-$2.toml"
  topo "$f" "$3" "$2" "$4" "$5" "${6:-}"
  wait_quiet
  "$hetflow" run "$f" --report "$f.json" >"$f.log" 2>&1 ||
    { cat "$f.log"; echo "hetflow run failed for $1 ($2 procs)" >&2; exit 1; }
  while read -r bytes us; do t_us[$1,$2,$bytes]+="$us "; done < <(/usr/bin/python3 -c "
import json; d=json.load(open('$f.json'))
assert d['members_identical'], 'members differ'
for r in d['result']['results']: print(r['bytes'], '%.1f' % r['time_us'])")
}

# --- NETNS=1: two processes, one in each namespace -----------------------------

declare -A veth_tx
veth_tx_a() { ip netns exec "$ns_a" cat "/sys/class/net/$veth_a/statistics/tx_bytes"; }

# veth_check LABEL BEFORE: the bytes A's veth end sent since BEFORE must be at
# least 90% of what the all-reduces of 2 processes send from one rank (every
# size once checked, WARMUP and ITERATIONS times, the whole buffer each time).
veth_check() {
  local sent=$(($(veth_tx_a) - $2)) need=0 s
  for s in "${sizes[@]}"; do need=$((need + s * (1 + warmup + iters))); done
  veth_tx[$1]+="$sent "
  if ((sent * 10 < need * 9)); then
    echo "$1: only $sent bytes went over the veth ($need expected): the traffic did not cross the namespaces" >&2
    exit 1
  fi
}

# wait_pair NAME PID0 PID1: waits for both; when one fails, stops the other.
wait_pair() {
  local name=$1 p0=$2 p1=$3 rc0="" rc1=""
  while [[ -z $rc0 || -z $rc1 ]]; do
    if [[ -z $rc0 ]] && ! kill -0 "$p0" 2>/dev/null; then wait "$p0" && rc0=0 || rc0=$?; fi
    if [[ -z $rc1 ]] && ! kill -0 "$p1" 2>/dev/null; then wait "$p1" && rc1=0 || rc1=$?; fi
    if [[ ${rc0:-0} != 0 && -z $rc1 ]]; then kill "$p1" 2>/dev/null || true; fi
    if [[ ${rc1:-0} != 0 && -z $rc0 ]]; then kill "$p0" 2>/dev/null || true; fi
    sleep 0.1
  done
  if [[ $rc0 != 0 || $rc1 != 0 ]]; then
    echo "$name failed: the process in $ns_a exited with $rc0, the one in $ns_b with $rc1" >&2
    return 1
  fi
}

run_ours_netns() {  # run_ours_netns LABEL PORT TLS ERROR_MODE
  local f="$work/$1-2.toml" before
  {
    echo '[cluster]'
    echo "name = \"allreduce-$1\""
    echo 'data_plane = "ucx"'
    echo "ucx_tls = \"$3\""
    echo "ucx_error_mode = \"$4\""
    printf '[[nodes]]\nname = "n0"\nhost = "%s"\nport = %d\n' "$ip_a" "$2"
    printf '[[nodes]]\nname = "n1"\nhost = "%s"\nport = %d\n' "$ip_b" $(($2 + 1))
    job_section
  } >"$f"
  rm -f "$f".n?.json*
  wait_quiet
  before=$(veth_tx_a)
  ip netns exec "$ns_a" "$hetflow" node "$f" --name n0 --report "$f.n0.json" >"$f.n0.log" 2>&1 &
  local p0=$!
  ip netns exec "$ns_b" "$hetflow" node "$f" --name n1 --report "$f.n1.json" >"$f.n1.log" 2>&1 &
  local p1=$!
  wait_pair "hetflow ($1)" "$p0" "$p1" ||
    { tail -n 20 "$f.n0.log" "$f.n1.log"; exit 1; }
  veth_check "$1" "$before"
  # The head node (n0) writes the job's members (result, members_identical)
  # to REPORT.job; `hetflow run --report` lifts them into its report.
  while read -r bytes us; do t_us[$1,2,$bytes]+="$us "; done < <(/usr/bin/python3 -c "
import json; d=json.load(open('$f.n0.json.job'))
assert d['members_identical'], 'members differ'
for r in d['result']['results']: print(r['bytes'], '%.1f' % r['time_us'])")
}

run_mpi_netns() {  # run_mpi_netns LABEL
  local label=$1 out="$work/$1-2.out" before
  wait_quiet
  before=$(veth_tx_a)
  # mpirun runs in A: rank 0 there, rank 1 in B. PMIx's server (in mpirun)
  # listens on loopback only unless remote connections are allowed; it then
  # listens on A's veth address, which rank 1 reaches over the veth.
  ip netns exec "$ns_a" env PMIX_MCA_ptl_tcp_remote_connections=1 PMIX_MCA_ptl_tcp_if_include="$ns_subnet.0/24" \
    mpirun --allow-run-as-root --oversubscribe --mca pml ob1 --mca btl tcp,self \
    --mca btl_tcp_if_include "$ns_subnet.0/24" --mca oob_tcp_if_include "$ns_subnet.0/24" \
    -np 1 "$work/mpi_allreduce" "$iters" "$warmup" "${sizes[@]}" : \
    -np 1 ip netns exec "$ns_b" "$work/mpi_allreduce" "$iters" "$warmup" "${sizes[@]}" \
    >"$out" 2>&1 || { cat "$out"; echo "mpirun across the namespaces failed" >&2; exit 1; }
  veth_check "$label" "$before"
  while read -r bytes us _; do t_us[$label,2,$bytes]+="$us "; done < <(grep -E '^[0-9]+ ' "$out")
}

run_gloo_netns() {  # run_gloo_netns LABEL PORT
  local label=$1 out="$work/$1-2" before
  wait_quiet
  before=$(veth_tx_a)
  ip netns exec "$ns_a" env MASTER_ADDR="$ip_a" MASTER_PORT="$2" GLOO_SOCKET_IFNAME="$veth_a" \
    /usr/bin/python3 "$src/bench/allreduce/gloo_allreduce.py" --rank 0 2 "$iters" "$warmup" "${sizes[@]}" \
    >"$out.0.out" 2>&1 &
  local p0=$!
  ip netns exec "$ns_b" env MASTER_ADDR="$ip_a" MASTER_PORT="$2" GLOO_SOCKET_IFNAME="$veth_b" \
    /usr/bin/python3 "$src/bench/allreduce/gloo_allreduce.py" --rank 1 2 "$iters" "$warmup" "${sizes[@]}" \
    >"$out.1.out" 2>&1 &
  local p1=$!
  wait_pair "gloo" "$p0" "$p1" || { tail -n 20 "$out.0.out" "$out.1.out"; exit 1; }
  veth_check "$label" "$before"
  while read -r bytes us _; do t_us[$label,2,$bytes]+="$us "; done < <(grep -E '^[0-9]+ ' "$out.0.out")
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
    [[ $messages == 1 ]] && run_ours hetflow-shmmsg "$np" 7860 "sm,self" none off
    run_ours hetflow-tcp "$np" 7880 "tcp,self" peer off
    run_mpi mpi-tcp "$np" --mca btl tcp,self
    run_gloo gloo-tcp "$np"
  done
  if [[ $netns == 1 ]]; then
    echo "round $round, 2 processes across namespaces $ns_a / $ns_b..." >&2
    run_ours_netns hetflow-veth 7890 "tcp,self" peer
    run_mpi_netns mpi-veth
    run_gloo_netns gloo-veth 29511
  fi
done

stats() {  # median [min-max] of a list of numbers
  /usr/bin/python3 -c "
import sys, statistics; v=[float(x) for x in sys.argv[1:]]
print('%.0f [%.0f-%.0f]' % (statistics.median(v), min(v), max(v)))" $1
}
med() { /usr/bin/python3 -c "import sys, statistics; print(statistics.median(float(x) for x in sys.argv[1:]))" $1; }

echo
echo "All-reduce, f32 sum, $(nproc) cores, $(date -u +%Y-%m-%d), REPEATS=${REPEATS:-3}, $iters iterations + $warmup warmup per run"
echo "gloo: torch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)'), TCP over loopback (the same measurement in the shm and tcp rows)$([[ $netns == 1 ]] && echo ", over the veth in the veth rows")"
[[ $noisy == 1 ]] && echo "(the machine was not quiet for some measurements)"
echo
echo "| procs | size | path | hetflow ring: time us | MPI_Allreduce: time us | gloo (tcp): time us | hetflow busbw GB/s | MPI busbw GB/s | gloo busbw GB/s | hetflow / MPI | hetflow / gloo |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for np in "${procs[@]}"; do
  for s in "${sizes[@]}"; do
    for path in shm shmmsg tcp veth; do
      ours=${t_us[hetflow-$path,$np,$s]:-} theirs=${t_us[mpi-${path/shmmsg/shm},$np,$s]:-}
      [[ -z $ours || -z $theirs ]] && continue
      mo=$(med "$ours") mt=$(med "$theirs")
      bo=$(awk "BEGIN{printf \"%.3f\", 2*($np-1)/$np*$s/($mo*1e3)}")
      bt=$(awk "BEGIN{printf \"%.3f\", 2*($np-1)/$np*$s/($mt*1e3)}")
      gp=${path/shmmsg/tcp}
      gloo=${t_us[gloo-${gp/shm/tcp},$np,$s]:-} gt="-" bg="-" rg="-"
      if [[ -n $gloo ]]; then
        mg=$(med "$gloo") gt=$(stats "$gloo")
        bg=$(awk "BEGIN{printf \"%.3f\", 2*($np-1)/$np*$s/($mg*1e3)}")
        rg=$(awk "BEGIN{printf \"%.2fx\", $mg/$mo}")
      fi
      label=$path
      [[ $path == veth ]] && label="tcp veth (2 netns)"
      [[ $path == shm ]] && label="shm (segment)"
      [[ $path == shmmsg ]] && label="shm (UCX messages)"
      echo "| $np | $((s >> 20)) MiB | $label | $(stats "$ours") | $(stats "$theirs") | $gt | $bo | $bt | $bg | $(awk "BEGIN{printf \"%.2fx\", $mt/$mo}") | $rg |"
    done
  done
done
if [[ $netns == 1 ]]; then
  need=0
  for s in "${sizes[@]}"; do need=$((need + s * (1 + warmup + iters))); done
  echo
  echo "veth rows: bytes sent by namespace A's veth end per run (the all-reduces alone send $need from each rank):"
  for label in hetflow-veth mpi-veth gloo-veth; do echo "  ${label%-veth}: ${veth_tx[$label]:-}"; done
fi
