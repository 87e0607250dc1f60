#!/usr/bin/env bash
# Runs dp_bench (our data plane) and ucx_perftest (raw UCP) back to back,
# ROUNDS times, alternating, so both see the same machine load; prints the
# median of each cell side by side.
#
#   bench/transport/raw/run_raw_bench.sh BUILD_DIR [ROUNDS] [extra dp_bench args...]
#
# ucx_perftest commands (server pinned to CPU 0, then the client with
# 127.0.0.1 pinned to CPU 1, like dp_bench's two processes; -w is warm-up
# iterations; outstanding sends left at perftest's default):
#   UCX_TLS=$tls ucx_perftest -t tag_lat -s 8        -n 20000 -w 2000 -p PORT -c 0
#   UCX_TLS=$tls ucx_perftest 127.0.0.1 -t tag_lat -s 8 -n 20000 -w 2000 -p PORT -c 1 -f
#   ... -t tag_bw -s 4194304  -n 500 -w 16
#   ... -t tag_bw -s 67108864 -n 60  -w 4
# perftest reports MB/s meaning MiB/s; converted here to GB/s (1e9 B/s).
set -euo pipefail
build=${1:?usage: run_raw_bench.sh BUILD_DIR [ROUNDS] [dp_bench args...]}
rounds=${2:-3}
shift $(( $# >= 2 ? 2 : 1 ))
dp="$build/bin/dp_bench"
[[ -x "$dp" ]] || { echo "no $dp; build the dp_bench target" >&2; exit 1; }
command -v ucx_perftest >/dev/null || { echo "ucx_perftest not found" >&2; exit 1; }

# This machine is shared (other builds come and go) and both sides busy-poll,
# so each measurement first waits (up to 5 min) until the CPUs have been at
# least 90% idle for a second.
wait_quiet() {
  local busy=100 t1 t2 i1 i2 u n s idle io irq sirq st
  for _ in $(seq 300); do
    read -r _ u n s idle io irq sirq st _ </proc/stat; t1=$((u+n+s+idle+io+irq+sirq+st)); i1=$idle
    sleep 1
    read -r _ u n s idle io irq sirq st _ </proc/stat; t2=$((u+n+s+idle+io+irq+sirq+st)); i2=$idle
    busy=$(( 100 - 100 * (i2 - i1) / (t2 - t1) ))
    (( busy <= 10 )) && return 0
  done
  echo "warning: machine still ${busy}% busy; measuring anyway" >&2
}

port=$((14000 + RANDOM % 1000))
results=$(mktemp)
trap 'rm -f "$results"' EXIT

# perftest TLS TEST SIZE ITERS WARMUP -> the client's final line
perftest() {
  local tls=$1 test=$2 size=$3 n=$4 w=$5 line="" srv
  for attempt in 1 2 3 4 5; do
    port=$((port + 1))
    UCX_TLS=$tls ucx_perftest -t "$test" -s "$size" -n "$n" -w "$w" -p "$port" -c 0 >/dev/null 2>&1 &
    srv=$!
    sleep 0.3
    line=$(UCX_TLS=$tls ucx_perftest 127.0.0.1 -t "$test" -s "$size" -n "$n" -w "$w" -p "$port" -c 1 -f 2>/dev/null | tail -1 || true)
    wait "$srv" || true
    [[ "$line" =~ ^[[:space:]]*[0-9] ]] && { echo "$line"; return; }
  done
  echo "perftest failed: $tls $test $size" >&2
  exit 1
}

for round in $(seq "$rounds"); do
  echo "round $round/$rounds (load: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  for tls in sm,self tcp,self; do
    wait_quiet
    "$dp" --tls "$tls" --reps 1 --csv "$@" 2>/dev/null >>"$results"
    wait_quiet
    l=$(perftest "$tls" tag_lat 8 20000 2000)
    echo "pt,${tls//,/+},8,,$(awk '{print $4}' <<<"$l")" >>"$results"
    for spec in "4194304 500 16" "67108864 60 4"; do
      read -r size n w <<<"$spec"
      wait_quiet
      l=$(perftest "$tls" tag_bw "$size" "$n" "$w")
      echo "pt,${tls//,/+},$size,$(awk '{printf "%.3f", $6 * 1048576 / 1e9}' <<<"$l")," >>"$results"
    done
  done
done

python3 - "$results" "$rounds" <<'EOF'
import csv, statistics, sys
rows = list(csv.reader(open(sys.argv[1])))
def med(who, tls, size, col):
    v = [float(r[col]) for r in rows if r[0] == who and r[1] == tls and r[2] == size and r[col]]
    return statistics.median(v) if v else float('nan'), v
print(f"median of {sys.argv[2]} alternating rounds")
print(f"{'size':<8} {'transport':<10} {'dp GB/s':>9} {'perftest GB/s':>14} {'ratio':>6} {'dp lat us':>10} {'perftest lat us':>16}")
for tls in ("sm+self", "tcp+self"):
    dl, dlv = med("dp", tls, "8", 4); pl, plv = med("pt", tls, "8", 4)
    print(f"{'8 B':<8} {tls:<10} {'-':>9} {'-':>14} {'-':>6} {dl:>10.2f} {pl:>16.2f}")
    for size, name in (("4194304", "4 MiB"), ("67108864", "64 MiB")):
        d, dv = med("dp", tls, size, 3); p, pv = med("pt", tls, size, 3)
        print(f"{name:<8} {tls:<10} {d:>9.2f} {p:>14.2f} {d / p:>6.2f} {'-':>10} {'-':>16}")
print("\nall runs (dp | perftest):")
for tls in ("sm+self", "tcp+self"):
    for size, col in (("8", 4), ("4194304", 3), ("67108864", 3)):
        print(f"  {tls:<9} {size:>9}: {med('dp', tls, size, col)[1]} | {med('pt', tls, size, col)[1]}")
EOF
