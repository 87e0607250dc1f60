#!/usr/bin/env bash
# Transport benchmark: tensor messages between two `hetflow node` processes
# through the node runtime (message_builder -> send_wire -> data plane ->
# receive buffer -> actor mailbox -> decode), for UCX shared memory, UCX TCP
# and the CAF fallback, side by side with ucx_perftest (tag_lat / tag_bw),
# iperf3 and a memory copy measured in the same run.
#
# hetflow puts messages from 4 MiB on transparent huge pages (send and pooled
# receive buffers), so ucx_perftest runs twice per transport: with its
# default allocation (the issue's peer) and with UCX_ALLOC_PRIO=thp,mmap,heap
# (its buffers on huge pages too: the like-for-like peer).
#
# TCP runs twice, once per `ucx_error_mode`: "peer" (the default; UCX 1.13
# then moves rendezvous data through active-message copies) is compared with
# `ucx_perftest -e` (endpoints with error handling, the same UCX mode), and
# "none" (zero-copy TCP) with plain ucx_perftest. Shared memory only works in
# mode none, so ucx-shm is compared with plain ucx_perftest.
#
#   bench/transport/run.sh [BUILD_DIR]      (default: build)
#   REPEATS=3 (rounds; each round runs ours then ucx_perftest, interleaved)
#   BYTES_PER_SIZE=1GiB (streamed per size and round by hetflow)
#
# Each cell is the median over the rounds, with [min-max].
# Needs: deploy/setup.sh --bench (iperf3), a built tree (hetflow, memcpy_bench).
# Prints a Markdown table; paste it into bench/RESULTS.md with the date.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$src/build}
hetflow=$build/bin/hetflow
work=$(mktemp -d /tmp/hetflow-bench-XXXXXX)
trap 'rm -rf "$work"; pkill -f "ucx_perftest" 2>/dev/null || true; pkill -f "iperf3 -s -p 7799" 2>/dev/null || true' EXIT
sizes=(8 4194304 67108864)

source "$src/bench/lib.sh"  # wait_quiet

topo() {  # topo NAME PORT DATA_PLANE TLS [ERROR_MODE]
  cat >"$work/$1.toml" <<TOML
[cluster]
name = "bench-$1"
data_plane = "$3"
ucx_tls = "$4"
ucx_error_mode = "${5:-peer}"
# Unpinned, like the ucx_perftest processes it is compared with (hetflow
# run's default pins each local node to its own CPUs; on 2 cores that costs
# loopback TCP 20-30%: bench/RESULTS.md, 2026-11-22 01:55).
pin_local_nodes = "off"
[[nodes]]
name = "a"
host = "127.0.0.1"
port = $2
[[nodes]]
name = "b"
host = "127.0.0.1"
port = $(($2 + 1))
[job]
kind = "transport_bench"
sizes = [8, "4MiB", "64MiB"]
bytes_per_size = "${BYTES_PER_SIZE:-1GiB}"
pings = 5000
window = 8
window_bytes = "128MiB"
TOML
}

declare -A ours_bw ours_lat
run_ours() {  # run_ours LABEL PORT DATA_PLANE TLS [ERROR_MODE]
  topo "$1" "$2" "$3" "$4" "${5:-}"
  wait_quiet
  "$hetflow" run "$work/$1.toml" --report "$work/$1.json" >"$work/$1.log" 2>&1 ||
    { cat "$work/$1.log"; echo "hetflow run failed for $1" >&2; exit 1; }
  while read -r bytes lat bw; do
    ours_lat[$1,$bytes]+="$lat "
    ours_bw[$1,$bytes]+="$bw "
  done < <(/usr/bin/python3 -c "
import json; d=json.load(open('$work/$1.json'))
for r in d['result']['results']: print(r['bytes'], '%.2f' % r['latency_us'], '%.3f' % r['gbytes_per_s'])")
}

declare -A perf_bw perf_lat
run_perftest() {  # run_perftest LABEL TLS PORT [EXTRA_FLAG]   (env PT_ENV: extra environment)
  local label=$1 tls=$2 port=$3 extra=(${4:-}) s
  local -a env_=(env UCX_TLS="$tls" ${PT_ENV:-})
  for s in "${sizes[@]}"; do
    local test=tag_bw iters
    iters=$(( s >= 67108864 ? 100 : (s >= 4194304 ? 1000 : 100000) ))
    local args=("${extra[@]}" -t tag_bw -s "$s" -n "$iters" -w 10 -p "$port")
    wait_quiet
    "${env_[@]}" ucx_perftest "${args[@]}" >"$work/perf-srv.log" 2>&1 &
    local srv=$!
    sleep 0.5
    "${env_[@]}" ucx_perftest "${args[@]}" 127.0.0.1 >"$work/perf-$label-$s.log" 2>&1 || true
    wait $srv || true
    # "Final:" iters, latency 50%ile/avg/overall (us), bandwidth avg/overall (MiB/s), msg rates
    perf_bw[$label,$s]+="$(awk '/Final:/ {printf "%.3f", $7 * 1048576 / 1e9}' "$work/perf-$label-$s.log") "
    if ((s == 8)); then
      "${env_[@]}" ucx_perftest "${extra[@]}" -t tag_lat -s 8 -n 100000 -p "$port" >"$work/perf-srv.log" 2>&1 &
      srv=$!
      sleep 0.5
      "${env_[@]}" ucx_perftest "${extra[@]}" -t tag_lat -s 8 -n 100000 -p "$port" 127.0.0.1 >"$work/perf-lat-$label.log" 2>&1 || true
      wait $srv || true
      # overall = total time / iterations: the same method as ours
      perf_lat[$label]+="$(awk '/Final:/ {printf "%.2f", $5}' "$work/perf-lat-$label.log") "
    fi
    port=$((port + 1))
  done
}

for round in $(seq 1 "${REPEATS:-3}"); do
  echo "round $round: hetflow transport_bench, then ucx_perftest..." >&2
  run_ours ucx-shm 7710 ucx "sm,self" none
  run_ours ucx-tcp-peer 7720 ucx "tcp,self" peer
  run_ours ucx-tcp-none 7760 ucx "tcp,self" none
  run_ours caf 7730 caf ""
  run_perftest ucx-shm "sm,self" 7740
  run_perftest ucx-tcp-peer "tcp,self" 7750 -e
  run_perftest ucx-tcp-none "tcp,self" 7770
  PT_ENV=UCX_ALLOC_PRIO=thp,mmap,heap run_perftest ucx-shm-thp "sm,self" 7780
  PT_ENV=UCX_ALLOC_PRIO=thp,mmap,heap run_perftest ucx-tcp-peer-thp "tcp,self" 7790 -e
  PT_ENV=UCX_ALLOC_PRIO=thp,mmap,heap run_perftest ucx-tcp-none-thp "tcp,self" 7800
done

echo "running iperf3 and memcpy..." >&2
iperf3 -s -p 7799 -1 >/dev/null 2>&1 &
sleep 0.5
iperf=$(iperf3 -c 127.0.0.1 -p 7799 -t 5 -J 2>/dev/null |
  /usr/bin/python3 -c "import json,sys; print('%.3f' % (json.load(sys.stdin)['end']['sum_received']['bits_per_second']/8e9))" || echo n/a)
memcpy=$("$build/bench-bin/memcpy_bench" 67108864 20 || true)

med() { /usr/bin/python3 "$src/bench/transport/stats.py" med $1; }
median() { /usr/bin/python3 "$src/bench/transport/stats.py" median $1; }
ratio() { /usr/bin/python3 -c "a,b='$1','$2'; print('%.2fx' % (float(a)/float(b)) if a and b and float(b)>0 else 'n/a')"; }

echo
echo "ucx-tcp-peer is compared with ucx_perftest -e (error handling on, as in mode peer); the others with plain ucx_perftest."
echo
echo "| size | transport | hetflow GB/s | ucx_perftest GB/s | ratio | ucx_perftest THP GB/s | ratio THP | hetflow latency us | ucx_perftest latency us |"
echo "|---|---|---|---|---|---|---|---|---|"
for s in "${sizes[@]}"; do
  for t in ucx-shm ucx-tcp-peer ucx-tcp-none caf; do
    pb=${perf_bw[$t,$s]:-}
    lat="-"; plat="-"
    if ((s == 8)); then lat=$(med "${ours_lat[$t,$s]}"); plat=$(med "${perf_lat[$t]:-}"); fi
    r=$( [[ -n "$pb" ]] && ratio "$(median "${ours_bw[$t,$s]}")" "$(median "$pb")" || echo "-")
    pt=${perf_bw[$t-thp,$s]:-}
    rt=$( [[ -n "$pt" ]] && ratio "$(median "${ours_bw[$t,$s]}")" "$(median "$pt")" || echo "-")
    echo "| $s | $t | $(med "${ours_bw[$t,$s]}") | $(med "$pb") | $r | $(med "$pt") | $rt | $lat | $plat |"
  done
done
echo
echo "peers in the same run: iperf3 TCP loopback $iperf GB/s; memcpy (1 thread, 64 MiB) $memcpy GB/s"
echo "machine: $(nproc) cores, $(uname -r); date: $(date -u +%F)"
