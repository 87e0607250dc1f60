#!/usr/bin/env bash
# Runs dp_bench (our data plane, both ucx error modes) and ucx_perftest (raw
# UCP) back to back, ROUNDS times, alternating, so all see the same machine
# load; prints the median of each cell side by side.
#
#   bench/transport/raw/run_raw_bench.sh BUILD_DIR [ROUNDS]
#   THP=1 bench/transport/raw/run_raw_bench.sh BUILD_DIR [ROUNDS]
#   RECYCLE=1 [THP=1] bench/transport/raw/run_raw_bench.sh BUILD_DIR [ROUNDS]
#
# THP=1 puts the send (and perftest's receive) buffers on transparent huge
# pages: dp_bench --sender-thp vs UCX_ALLOC_PRIO=thp,mmap,heap ucx_perftest.
# (Our receive buffers are always THP-advised when >= 4 MiB.)
# RECYCLE=1 runs dp_bench --recycle: receive buffers come back to a pool
# (ucx_options::receive_buffer_allocator), as perftest reuses its buffer.
#
# ucx_perftest commands (server pinned to CPU 0, then the client with
# 127.0.0.1 pinned to CPU 1, like dp_bench's two processes; -w is warm-up
# iterations; outstanding sends left at perftest's default):
#   UCX_TLS=$tls ucx_perftest -t tag_lat -s 8 -n 20000 -w 2000 -p PORT -c 0
#   UCX_TLS=$tls ucx_perftest 127.0.0.1 -t tag_lat -s 8 -n 20000 -w 2000 -p PORT -c 1 -f
#   ... -t tag_bw -s 4194304  -n 500 -w 16
#   ... -t tag_bw -s 67108864 -n 60  -w 4
# perftest reports MB/s meaning MiB/s; converted here to GB/s (1e9 B/s).
set -euo pipefail
build=${1:?usage: run_raw_bench.sh BUILD_DIR [ROUNDS]}
rounds=${2:-3}
dp="$build/bin/dp_bench"
[[ -x "$dp" ]] || { echo "no $dp; build the dp_bench target" >&2; exit 1; }
command -v ucx_perftest >/dev/null || { echo "ucx_perftest not found" >&2; exit 1; }
thp=${THP:-0}
recycle=${RECYCLE:-0}
dp_thp=() pt_env=()
[[ "$recycle" == 1 ]] && dp_thp+=(--recycle)
if [[ "$thp" == 1 ]]; then
  dp_thp+=(--sender-thp)
  pt_env=(UCX_ALLOC_PRIO=thp,mmap,heap)
fi

source "$(cd "$(dirname "$0")/../.." && pwd)/lib.sh"  # wait_quiet

port=$((14000 + RANDOM % 1000))
results=$(mktemp)
trap 'rm -f "$results"' EXIT

# perftest TLS TEST SIZE ITERS WARMUP -> the client's final line
perftest() {
  local tls=$1 test=$2 size=$3 iters=$4 warm=$5 line="" srv
  for _ in 1 2 3 4 5; do
    port=$((port + 1))
    env "${pt_env[@]}" UCX_TLS="$tls" timeout 300 ucx_perftest -t "$test" -s "$size" -n "$iters" -w "$warm" \
      -p "$port" -c 0 >/dev/null 2>&1 &
    srv=$!
    sleep 0.3
    line=$(env "${pt_env[@]}" UCX_TLS="$tls" timeout 300 ucx_perftest 127.0.0.1 -t "$test" -s "$size" \
      -n "$iters" -w "$warm" -p "$port" -c 1 -f 2>/dev/null | tail -1 || true)
    wait "$srv" || true
    [[ "$line" =~ ^[[:space:]]*[0-9] ]] && { echo "$line"; return; }
  done
  echo "perftest failed: $tls $test $size" >&2
  exit 1
}

for round in $(seq "$rounds"); do
  echo "round $round/$rounds (load: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  for tls in sm,self tcp,self; do
    key=${tls//,/+}
    for mode in peer none; do
      wait_quiet
      "$dp" --tls "$tls" --reps 1 --csv --error-mode "$mode" "${dp_thp[@]}" 2>/dev/null >>"$results"
    done
    wait_quiet
    l=$(perftest "$tls" tag_lat 8 20000 2000)
    echo "pt,$key,8,,$(awk '{print $4}' <<<"$l")" >>"$results"
    for spec in "4194304 500 16" "67108864 60 4"; do
      read -r size iters warm <<<"$spec"
      wait_quiet
      l=$(perftest "$tls" tag_bw "$size" "$iters" "$warm")
      echo "pt,$key,$size,$(awk '{printf "%.3f", $6 * 1048576 / 1e9}' <<<"$l")," >>"$results"
    done
  done
done

python3 - "$results" "$rounds" "$thp" "$recycle" <<'EOF'
import csv, statistics, sys
rows = list(csv.reader(open(sys.argv[1])))
suffix = ("-recycle" if sys.argv[4] == "1" else "") + ("-thp" if sys.argv[3] == "1" else "")
def cell(who, tls, size, col):
    v = [float(r[col]) for r in rows if r[0] == who and r[1] == tls and r[2] == size and r[col]]
    return (statistics.median(v) if v else float('nan')), v
peer, none = "dp-peer" + suffix, "dp-none" + suffix
print(f"median of {sys.argv[2]} alternating rounds{'; THP buffers' if sys.argv[3] == '1' else ''}"
      f"{'; dp receive buffers recycled' if sys.argv[4] == '1' else ''}")
print(f"{'size':<7} {'transport':<9} {'dp peer':>8} {'dp none':>8} {'perftest':>9} {'peer/pt':>8} {'none/pt':>8}   (GB/s; 8 B row: one-way latency, us)")
for tls in ("sm+self", "tcp+self"):
    for size, name, col in (("8", "8 B", 4), ("4194304", "4 MiB", 3), ("67108864", "64 MiB", 3)):
        a, b, p = cell(peer, tls, size, col)[0], cell(none, tls, size, col)[0], cell("pt", tls, size, col)[0]
        print(f"{name:<7} {tls.replace('+', ','):<9} {a:>8.2f} {b:>8.2f} {p:>9.2f} {a / p:>8.2f} {b / p:>8.2f}")
print("\nall runs (dp peer | dp none | perftest):")
for tls in ("sm+self", "tcp+self"):
    for size, col in (("8", 4), ("4194304", 3), ("67108864", 3)):
        print(f"  {tls.replace('+', ','):<9} {size:>9}: {cell(peer, tls, size, col)[1]} | {cell(none, tls, size, col)[1]} | {cell('pt', tls, size, col)[1]}")
EOF
