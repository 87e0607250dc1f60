# shellcheck shell=bash
# Network namespaces for multi-host integration tests (sourced after lib.sh).
#
# netns_setup N builds N "hosts" and a switch:
#
#   namespace $NS_PREFIX-hub:  bridge br0, ports p0 .. p(N-1)          (the switch)
#   namespace $NS_PREFIX-nI:   lo + eth0 = $NETNS_SUBNET.(I+1)/24       (host I)
#                              eth0 <-- veth --> p I on br0
#
# Nothing is connected to the root namespace: the hosts reach each other only
# through the bridge, never the machine's own interfaces. Names carry the
# test's PID ($NS_PREFIX = hfns-$$), so runs side by side do not clash, and
# interface names live inside the namespaces (no name in the root namespace).
#
# netns_cut I / netns_heal I take host I's switch port down / up: a partition
# in which host I's own link stays up and packets are silently lost (as when
# a cable or a switch port fails), not refused. netns_split I J cuts only the
# path between hosts I and J (blackhole routes).
#
# Teardown runs from the EXIT trap (also after INT/TERM): it kills whatever
# still runs in the namespaces and deletes them (and with them the veths).
# Namespaces left by an earlier run of a test that was SIGKILLed (CTest's
# timeout) are reaped at setup: only ours (hfns-PID-), only if PID is dead.
#
# Tests that cannot have namespaces here (not root, no iproute2, no netns or
# veth support) exit 77: CTest reports them as skipped (SKIP_RETURN_CODE 77).

NETNS_SUBNET=${NETNS_SUBNET:-10.201.0}
NS_PREFIX=hfns-$$
NS_HOSTS=()     # namespace of host I
NS_ADDR=()      # address of host I
NS_CREATED=()   # every namespace we made, hub last

skip() { echo "SKIP: $*"; exit 77; }

netns_teardown() {
  local ns pids i
  for ((i = ${#NS_CREATED[@]} - 1; i >= 0; i--)); do
    ns=${NS_CREATED[$i]}
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [[ -n $pids ]] && kill -9 $pids 2>/dev/null
    ip netns del "$ns" 2>/dev/null
    rm -rf "/etc/netns/$ns"
  done
  NS_CREATED=()
  ((${NS_ETC_CREATED:-0})) && rmdir /etc/netns 2>/dev/null
  return 0
}

netns_exit() {
  local rc=$?
  cleanup           # lib.sh: kills the processes we started
  netns_teardown
  exit $rc
}
trap netns_exit EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

netns_reap_stale() {
  local ns pid pids
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^hfns-[0-9]+-' || true); do
    pid=${ns#hfns-}
    pid=${pid%%-*}
    kill -0 "$pid" 2>/dev/null && continue
    echo "netns: removing $ns left by a dead run (pid $pid)"
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [[ -n $pids ]] && kill -9 $pids 2>/dev/null
    ip netns del "$ns" 2>/dev/null || true
    rm -rf "/etc/netns/$ns"
  done
}

netns_setup() {  # netns_setup N
  local n=$1 i err
  [[ $(id -u) == 0 ]] || skip "needs root (creates network namespaces and veth pairs)"
  command -v ip >/dev/null || skip "needs iproute2's ip"
  err=$(ip netns list 2>&1) || skip "'ip netns' does not work here: $err"
  netns_reap_stale
  local hub=$NS_PREFIX-hub
  err=$(ip netns add "$hub" 2>&1) || skip "ip netns add failed: $err"
  NS_CREATED+=("$hub")
  err=$({ ip -n "$hub" link set lo up &&
          ip -n "$hub" link add br0 type bridge &&
          ip -n "$hub" link set br0 up; } 2>&1) || skip "no bridge in a namespace: $err"
  for ((i = 0; i < n; i++)); do
    local ns=$NS_PREFIX-n$i addr=$NETNS_SUBNET.$((i + 1))
    err=$(ip netns add "$ns" 2>&1) || fail "ip netns add $ns: $err"
    NS_CREATED=("$ns" "${NS_CREATED[@]}")
    err=$({ ip -n "$hub" link add "p$i" type veth peer name eth0 netns "$ns" &&
            ip -n "$hub" link set "p$i" master br0 &&
            ip -n "$hub" link set "p$i" up &&
            ip -n "$ns" link set lo up &&
            ip -n "$ns" addr add "$addr/24" dev eth0 &&
            ip -n "$ns" link set eth0 up; } 2>&1) ||
      skip "veth pair for host $i failed (no veth support?): $err"
    NS_HOSTS[$i]=$ns
    NS_ADDR[$i]=$addr
  done
  # Links take a moment to report UP (carrier on both ends).
  local _
  for _ in $(seq 50); do
    local up=1
    for ((i = 0; i < n; i++)); do
      [[ $(ip -n "${NS_HOSTS[$i]}" -br link show eth0 2>/dev/null) == *" UP "* ]] || up=0
    done
    ((up)) && return 0
    sleep 0.1
  done
  ip -n "$hub" -br link
  fail "veth links did not come up"
}

netns_cut() { ip -n "$NS_PREFIX-hub" link set "p$1" down; }
netns_heal() { ip -n "$NS_PREFIX-hub" link set "p$1" up; }

# netns_split I J / netns_unsplit I J: hosts I and J lose each other (a
# blackhole route to the other on each side: packets vanish, no error comes
# back), while both still reach every other host.
netns_split() {
  ip -n "${NS_HOSTS[$1]}" route add blackhole "${NS_ADDR[$2]}/32" &&
    ip -n "${NS_HOSTS[$2]}" route add blackhole "${NS_ADDR[$1]}/32"
}
netns_unsplit() {
  ip -n "${NS_HOSTS[$1]}" route del blackhole "${NS_ADDR[$2]}/32"
  ip -n "${NS_HOSTS[$2]}" route del blackhole "${NS_ADDR[$1]}/32"
}

# netns_hosts_file I LINES...: /etc/hosts as host I's processes see it
# (`ip netns exec` binds /etc/netns/NAME/hosts over /etc/hosts); removed at
# teardown. For names that only resolve inside the "cluster" (Kubernetes DNS).
netns_hosts_file() {
  local i=$1
  shift
  [[ -d /etc/netns ]] || NS_ETC_CREATED=1
  mkdir -p "/etc/netns/${NS_HOSTS[$i]}"
  { echo "127.0.0.1 localhost"; printf '%s\n' "$@"; } >"/etc/netns/${NS_HOSTS[$i]}/hosts"
}

# netns_bytes I rx|tx: bytes host I's eth0 received / sent so far.
netns_bytes() { ip netns exec "${NS_HOSTS[$1]}" cat "/sys/class/net/eth0/statistics/$2_bytes"; }

# netns_topology FILE BASE_PORT N DATA_PLANE [job lines...]: lib.sh's
# write_topology, with node I on host I's address and a 60 s join timeout
# (nodes in namespaces on a loaded 2-core machine join slower).
netns_topology() {
  local file=$1
  write_topology "$@"
  awk -v addrs="${NS_ADDR[*]}" 'BEGIN { split(addrs, a, " ") }
    /^host = "127\.0\.0\.1"$/ { print "host = \"" a[++i] "\""; next }
    /^join_timeout = / { print "join_timeout = \"60s\""; next }
    { print }' "$file" >"$file.tmp" && mv "$file.tmp" "$file"
}

# netns_start_nodes TOPO N [args...]: node nI in host I's namespace, log
# TOPO.nI.log, report TOPO.nI.json; pids in NODE_PIDS (and PIDS for cleanup).
netns_start_nodes() {
  local topo=$1 n=$2 i
  shift 2
  NODE_PIDS=()
  for ((i = 0; i < n; i++)); do
    rm -f "$topo.n$i.json"
    ip netns exec "${NS_HOSTS[$i]}" "$HETFLOW" node "$topo" --name "n$i" \
      --report "$topo.n$i.json" "$@" >"$topo.n$i.log" 2>&1 &
    NODE_PIDS[$i]=$!
    PIDS+=($!)
  done
}

# netns_leftovers: processes still running in any host namespace (none expected).
netns_leftovers() {
  local i
  for ((i = 0; i < ${#NS_HOSTS[@]}; i++)); do
    ip netns pids "${NS_HOSTS[$i]}" 2>/dev/null
  done
}

# Seconds since midnight (local time) of now, and of a log line's stamp
# "HH:MM:SS.mmm" (hetflow logs local time).
now_sod() { date +%H:%M:%S.%N | awk -F: '{printf "%.3f", $1 * 3600 + $2 * 60 + $3}'; }
stamp_sod() { awk -F: '{printf "%.3f", $1 * 3600 + $2 * 60 + $3}' <<<"$1"; }
