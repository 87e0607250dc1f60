# Shared by the benchmark scripts: source "$(dirname "$0")/../lib.sh".

# This machine is shared (others' builds and benchmarks come and go) and our
# benchmarks busy-poll, so each measurement first waits (up to QUIET_MAX
# seconds, default 300) until the CPUs have been at least 90% idle for a
# second. Sets noisy=1 when it gives up and measures anyway.
noisy=0
wait_quiet() {
  local busy=100 t1 t2 i1 i2 u n s idle io irq sirq st
  for _ in $(seq "${QUIET_MAX:-300}"); do
    read -r _ u n s idle io irq sirq st _ </proc/stat; t1=$((u+n+s+idle+io+irq+sirq+st)); i1=$idle
    sleep 1
    read -r _ u n s idle io irq sirq st _ </proc/stat; t2=$((u+n+s+idle+io+irq+sirq+st)); i2=$idle
    busy=$(( 100 - 100 * (i2 - i1) / (t2 - t1) ))
    (( busy <= 10 )) && return 0
  done
  echo "warning: machine still ${busy}% busy; measuring anyway" >&2
  noisy=1
}
